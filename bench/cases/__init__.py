"""The cases of `make bench` (bench/suite.py runs them), one module each: idle, burst (and the
100,000 burst), rate, holding, hol (head of line), throughput, webhooks, isolation (the tarpit and
the flood). Each has a ``run(b, …)`` (isolation: ``tarpit`` and ``flood``) taking the ``Bench`` of
base.py, which holds what they share (the client, the comparisons' workers, the samples)."""
