"""The delay cascade as pure data: names, keys, plans (``cascade``), the path table
(``explain``), definitions JSON (``definitions``) and a plan compared with the broker's listings
(``diff``). No I/O and no Django: the broker package (``rabbit``) declares and reads it."""
