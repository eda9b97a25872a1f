"""Pages written from the specs: the tables of docs/reference/configuration.md and conf()'s
class in config/conf.py (``manage.py settings_reference`` writes both; tests fail while they differ)."""

from __future__ import annotations

import textwrap

from scheduling.config.parsers import ROOT
from scheduling.config.specs import SPECS

# --- the reference page -------------------------------------------------------------------------

REFERENCE = ROOT / "docs" / "reference" / "configuration.md"
BEGIN = ("<!-- Written from scheduling/config/specs.py by `manage.py settings_reference`: edit the specs "
         "there, not these tables. -->")
END = "<!-- End of the tables written from the specs. -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_table() -> str:
    """The reference page's tables, one per group: variable, default, example, meaning."""
    lines = []
    for group in dict.fromkeys(spec.group for spec in SPECS):
        lines += [f"### {group}", "", "| variable | default | example | meaning |", "|---|---|---|---|"]
        for spec in (s for s in SPECS if s.group == group):
            default = spec.shown_default or (f"`{spec.default}`" if spec.default else "—")
            lines.append(f"| `{spec.env}` | {_cell(default)} | `{_cell(spec.example)}` | {_cell(spec.doc)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def _between_markers(text: str, begin: str, end: str, written: str, what: str) -> str:
    """``text`` with the part between its ``begin`` and ``end`` markers replaced by ``written``."""
    head, found_begin, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not (found_begin and found_end):
        raise ValueError(f"the {what} has no {begin!r} ... {end!r} markers")
    return f"{head}{begin}{written}{end}{tail}"


def reference_page(text: str) -> str:
    """The page ``text`` with the part between BEGIN and END written anew."""
    return _between_markers(text, BEGIN, END, f"\n\n{reference_table()}\n\n", "page")


# --- conf()'s class, written out in config/conf.py ------------------------------------------------

CONF = ROOT / "scheduling" / "config" / "conf.py"
CLASS_BEGIN = "# --- DelaySettings: written from config/specs.py by `manage.py settings_reference` (edit the specs) ---"
CLASS_END = "# --- end of DelaySettings ---"
_TYPE_NAMES = {"datetime.timedelta": "timedelta", "pathlib.Path": "Path"}


def _type_source(kind: object) -> str:
    text = kind.__name__ if isinstance(kind, type) and kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}" if isinstance(kind, type) else repr(kind))
    for long, short in _TYPE_NAMES.items():
        text = text.replace(long, short)
    return text


def _docstring(doc: str) -> str:
    text = "\n    ".join(textwrap.wrap(doc.replace("\\", "\\\\"), width=100, break_on_hyphens=False))
    return f'"""{text}"""'


def conf_class() -> str:
    """conf()'s class as the specs make it: a field per spec marked ``conf``, its type the
    parser's, written out so that editors and type checkers follow ``conf().delivery_batch``."""
    fields = "\n".join(f"    {spec.key}: {_type_source(spec.parse.type)}\n    {_docstring(spec.doc)}"
                       for spec in SPECS if spec.conf)
    return ('@dataclass(frozen=True)\nclass DelaySettings:\n    """The platform\'s settings, read from Django\'s (conf() below)."""\n\n'
            f"{fields}\n")


def conf_module(text: str) -> str:
    """config/conf.py's ``text`` with its class between CLASS_BEGIN and CLASS_END written anew."""
    return _between_markers(text, CLASS_BEGIN, CLASS_END, f"\n\n\n{conf_class()}\n\n", "module")
