"""The platform with a history: 0, 10 M and 50 M finished messages (make bench-history). The run
is __main__.py (``python -m bench.history``); cases.py times each size, fill.py adds the finished
rows, pages.py times the admin and API pages, plans.py reads their EXPLAINs."""
