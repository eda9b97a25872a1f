"""Reads. The database's in database.py (and the accuracy report's own, reports/facts.py), the
broker's in broker.py (queue depths, what is in flight, whether a cascade is as planned), and
where a page of messages ends in cursors.py. Callers import each function from its module;
nothing is re-exported here."""
