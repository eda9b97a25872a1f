"""The nightly delay-accuracy report, as one slice: what it counts (selectors.py: the messages due
on its days, the archive's files of those days, and its rows for the admin), the export of the live
rows to Parquet (export.py), the Spark job that turns them into one row per day and group
(accuracy.py, launched by spark_job.py), the service that runs the three stages and loads the rows
into AccuracyReport (services.py), and the admin's charts of them (accuracy_charts.py). The admin's
page is scheduling/admin/reports.py; the commands are accuracy_report and export_deliveries.

accuracy.py imports nothing from Django or this package, so ``spark-submit`` can ship it alone.
"""
