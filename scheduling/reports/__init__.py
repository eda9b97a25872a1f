"""The nightly delay-accuracy report: export ScheduledMessage facts to Parquet (export.py), a
Spark job turns them into one row per day and group (accuracy.py), and the rows are loaded into
AccuracyReport (services/reports.py) for the admin's table and charts (charts.py).

accuracy.py imports nothing from Django or this package, so ``spark-submit`` can ship it alone.
"""
