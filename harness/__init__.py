"""What the tests and the benchmarks share: the repository's paths, waiting for a condition, real
Celery worker processes, a recording webhook server, RabbitMQ nodes and clusters of a run's own, a
Spark standalone cluster, and a throwaway copy of the whole platform (web, workers, database).

Imported as ``harness.<module>`` from the repository root (pytest's rootdir, or ``python -m
bench.<name>``), never through this package: it imports nothing, so importing one piece does not
start Django or reach a broker. The platform's own packages never import it (tests/test_layout.py).
"""
