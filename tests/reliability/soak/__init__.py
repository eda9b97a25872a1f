"""The soak: the platform as `make run` deploys it, under steady load with pruning, kills and a
broker restart, judged on what it lost, doubled or grew (docs/operations/reliability.md). `make soak` runs
it for SOAK_MINUTES (``python -m tests.reliability.soak``); tests/reliability/test_soak.py for three."""
