"""The six cases of `make bench` (bench/suite.py runs them), one module each: idle, burst, rate,
holding, hol (head of line), throughput. Each has a ``run(b, …)`` taking the ``Bench`` of
base.py, which holds what they share (the client, the comparisons' workers, the samples)."""
