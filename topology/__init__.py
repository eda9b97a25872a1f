"""The delay cascade: pure data (``cascade``), definitions export, and one kombu adapter
(``broker``). Free of Django so it stays small and testable without a broker."""
