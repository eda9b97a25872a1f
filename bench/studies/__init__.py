"""The studies: one-off measurements whose figures the docs quote, kept so that they can be run
again (``python -m bench.studies.<name>``). No make target runs them; README.md beside this file is
their index: what each measured and the page that cites its figures."""
