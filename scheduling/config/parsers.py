"""Parsers: the text of an environment variable -> a value, or one line saying why not."""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Iterable, Mapping
from datetime import time, timedelta
from pathlib import Path
from typing import Any, NoReturn

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from scheduling.core import durations
from scheduling.core.networks import Network, parse_networks
from topology import cascade

ROOT = Path(__file__).resolve().parents[2]  # beside manage.py: .env, and where relative paths start


def _either(options: Iterable[str]) -> str:
    """("a", "b", "c") -> "a, b or c"."""
    options = list(options)
    return ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]


# --- parsers: the text of a variable -> a value, or one line saying why not -----------------------


class Parser:
    """Reads a variable's text (:meth:`parse`, from the environment) and checks a value given as
    it is (:meth:`check`: Django's setting, already parsed, or a test's ``override_settings``).
    Both raise ImproperlyConfigured with one line that names the variable."""

    type: Any = str  # the value's type: the annotation of conf()'s field

    def parse(self, text: str, name: str) -> Any:
        raise NotImplementedError

    def check(self, value: Any, name: str) -> Any:
        self.refuse(value, name)

    @staticmethod
    def refuse(value: Any, name: str) -> NoReturn:
        """A value of a kind this parser does not read."""
        raise ImproperlyConfigured(f"{name} must be text, not {value!r}")

    def coerce(self, value: Any, name: str) -> Any:
        return self.parse(value, name) if isinstance(value, str) else self.check(value, name)


class Text(Parser):
    def __init__(self, *, strip: bool = True) -> None:
        self.strip = strip

    def parse(self, text: str, name: str) -> str:
        return text.strip() if self.strip else text


class Items(Parser):
    """A comma-separated list (spaces and empty items ignored): a list, or a tuple (``kind``)."""

    def __init__(self, kind: type = tuple) -> None:
        self.kind = kind
        self.type = list[str] if kind is list else tuple[str, ...]

    def parse(self, text: str, name: str) -> Any:
        return self.kind(item.strip() for item in text.split(",") if item.strip())

    def check(self, value: Any, name: str) -> Any:
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return self.parse(",".join(value), name)
        self.refuse(value, name)


class Boolean(Parser):
    type = bool
    ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

    def parse(self, text: str, name: str) -> bool:
        word = text.strip().lower()
        if word in self.ON or word in self.OFF:
            return word in self.ON
        raise ImproperlyConfigured(f"{name} must be on or off (1/0, true/false, yes/no), not {text!r}")

    def check(self, value: Any, name: str) -> bool:
        if isinstance(value, bool):
            return value
        raise ImproperlyConfigured(f"{name} must be on or off, not {value!r}")


class Integer(Parser):
    """A whole number; ``min``/``max`` bound it (``off``: the value that turns the thing off,
    named in the message; ``why``: the reason for the bound)."""

    type = int

    def __init__(self, *, min: int | None = None, max: int | None = None, off: int | None = None, why: str = "") -> None:
        self.min, self.max, self.off, self.why = min, max, off, why

    def parse(self, text: str, name: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be a whole number, not {text!r}") from None
        return self.check(value, name)

    def check(self, value: Any, name: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}")
        why = f" ({self.why})" if self.why else ""
        if self.min is not None and self.max is not None and not self.min <= value <= self.max:
            low = f"{self.min} (off)" if self.off == self.min else str(self.min)
            raise ImproperlyConfigured(f"{name} must be {low} to {self.max}{why}, not {value!r}")
        if self.min is not None and value < self.min:
            raise ImproperlyConfigured(f"{name} must be at least {self.min}{why}, not {value!r}")
        return value


class Number(Parser):
    """A number (float); ``min``: at least, ``above``: more than."""

    type = float

    def __init__(self, *, min: float | None = None, above: float | None = None) -> None:
        self.min, self.above = min, above

    def parse(self, text: str, name: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be a number, not {text!r}") from None
        return self.check(value, name)

    def check(self, value: Any, name: str) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ImproperlyConfigured(f"{name} must be a number, not {value!r}")
        number = float(value)
        if self.above is not None and not number > self.above:
            raise ImproperlyConfigured(f"{name} must be more than {self.above:g}, not {number!r}")
        if self.min is not None and not number >= self.min:
            raise ImproperlyConfigured(f"{name} must be at least {self.min:g}, not {number!r}")
        return number


class Choice(Parser):
    """One of a few words (in lower case)."""

    def __init__(self, *options: str) -> None:
        self.options = options

    def parse(self, text: str, name: str) -> str:
        word = text.strip().lower()
        if word not in self.options:
            raise ImproperlyConfigured(f"{name} must be {_either(self.options)}, not {word!r}")
        return word


class LogLevel(Parser):
    """A logging level's name (what logging knows: WARN too)."""

    def parse(self, text: str, name: str) -> str:
        level = text.strip().upper()
        if not isinstance(logging.getLevelName(level), int):
            raise ImproperlyConfigured(f"{name} must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {level!r}")
        return level


class Version(Parser):
    """The name of a cascade version topology/cascade.py defines."""

    def parse(self, text: str, name: str) -> str:
        version = text.strip()
        if version not in cascade.VERSIONS:
            raise ImproperlyConfigured(f"{name} is {version!r}; known versions: {', '.join(cascade.VERSIONS)}")
        return version


class Shards(Parser):
    """``v3=4,v2=2`` (or a dict, from tests' settings) -> {"v3": 4, "v2": 2}: a known version each,
    named once, with a whole number of shards from 1 to cascade.MAX_SHARDS."""

    type = dict[str, int]

    def parse(self, text: str, name: str) -> dict[str, int]:
        items = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            version, equals, count = item.partition("=")
            if not equals:
                raise ImproperlyConfigured(f"{name}: {item!r} is not VERSION=COUNT (e.g. {name}=v3=4,v2=2)")
            items.append((version.strip(), count.strip()))
        return self._shards(items, name)

    def check(self, value: Any, name: str) -> dict[str, int]:
        if isinstance(value, Mapping):
            shards = self._shards([(str(version), count) for version, count in value.items()], name)
            return value if shards == value and isinstance(value, dict) else shards  # settings.py's: as it is
        self.refuse(value, name)

    @staticmethod
    def _shards(items: Iterable[tuple[str, Any]], name: str) -> dict[str, int]:
        shards: dict[str, int] = {}
        for version, count in items:
            if version not in cascade.VERSIONS:
                raise ImproperlyConfigured(
                    f"{name} names the unknown version {version!r}; known versions: {', '.join(cascade.VERSIONS)}")
            if version in shards:
                raise ImproperlyConfigured(f"{name} names {version} twice")
            try:
                number = count if isinstance(count, int) and not isinstance(count, bool) else int(str(count), 10)
            except ValueError:
                raise ImproperlyConfigured(f"{name}: the shards of {version} must be a whole number, not {count!r}") \
                    from None
            if not 1 <= number <= cascade.MAX_SHARDS:
                raise ImproperlyConfigured(f"{name}: {version} may have 1 to {cascade.MAX_SHARDS} shards, not {number}")
            shards[version] = number
        return shards


class Networks(Parser):
    """CIDRs, comma-separated (or a list of them, or of networks) -> a tuple of networks."""

    type = tuple[Network, ...]

    def parse(self, text: str, name: str) -> tuple[Network, ...]:
        return self.check(text, name)

    def check(self, value: Any, name: str) -> tuple[Network, ...]:
        if isinstance(value, tuple) and all(isinstance(item, Network) for item in value):
            return value  # parsed already (settings.py's)
        try:
            return parse_networks(value)
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(f"{name}: {exc}") from None


class ApiRate(Parser):
    """``<number>/<second|minute|hour|day>`` (s, m, h, d and sec, min too), or ``off`` (None)."""

    type = str | None
    RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")

    def parse(self, text: str, name: str) -> str | None:
        rate = text.strip()
        if rate.lower() == "off":
            return None
        if not self.RATE.fullmatch(rate):
            raise ImproperlyConfigured(f"{name} must be like 6000/minute (or s, hour, day) or off, not {rate!r}")
        return rate

    def check(self, value: Any, name: str) -> str | None:
        return None if value is None else super().check(value, name)


class ApiRateGroups(Parser):
    """``partners=100/second,batch=off`` (or a dict, from tests' settings) -> {"partners":
    "100/second", "batch": None}: a Django group's members get its rate instead of DELAY_API_RATE."""

    type = dict[str, str | None]

    def parse(self, text: str, name: str) -> dict[str, str | None]:
        items = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            group, equals, rate = item.partition("=")
            if not equals or not group.strip():
                raise ImproperlyConfigured(f"{name}: {item!r} is not GROUP=RATE (e.g. {name}=partners=100/second)")
            items[group.strip()] = rate
        return self.check(items, name)

    def check(self, value: Any, name: str) -> dict[str, str | None]:
        if not isinstance(value, Mapping):
            self.refuse(value, name)
        return {str(group): ApiRate().coerce(rate, f"{name} ({group})") for group, rate in value.items()}


class TimeOfDay(Parser):
    """``HH:MM`` (UTC) -> a time, or ``off`` (None)."""

    type = time | None

    def parse(self, text: str, name: str) -> time | None:
        word = text.strip()
        if word.lower() == "off":
            return None
        try:
            hour, minute = (int(part, 10) for part in word.split(":"))
            return time(hour, minute)
        except ValueError:
            raise ImproperlyConfigured(f"{name} must be HH:MM (UTC) or off, not {word!r}") from None

    def check(self, value: Any, name: str) -> time | None:
        return value if value is None or isinstance(value, time) else super().check(value, name)


class Duration(Parser):
    """``90s``, ``15m``, ``12h``, ``7d`` (scheduling/core/durations.py) -> a timedelta; ``off`` (None)
    where allowed."""

    def __init__(self, *, off: bool = False) -> None:
        self.off = off
        self.type = timedelta | None if off else timedelta

    def parse(self, text: str, name: str) -> timedelta | None:
        try:
            if self.off:
                return durations.parse_duration_or_off(text, name=name)
            return durations.parse_duration(text, name=name)
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from None

    def check(self, value: Any, name: str) -> timedelta | None:
        if (value is None and self.off) or (isinstance(value, timedelta) and value >= timedelta(0)):
            return value
        self.refuse(value, name)


class Directory(Parser):
    """A path (a relative one starts beside manage.py); empty: None where ``optional``."""

    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional
        self.type = Path | None if optional else Path

    def parse(self, text: str, name: str) -> Path | None:
        return self.check(text.strip(), name)

    def check(self, value: Any, name: str) -> Path | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, (str, os.PathLike)):
            self.refuse(value, name)
        if str(value) == "":
            if self.optional:
                return None
            raise ImproperlyConfigured(f"{name} must be a directory's path")
        return ROOT / Path(value).expanduser()  # an absolute path stays as it is


class Header(Parser):
    """An HTTP header's name (letters, digits, dashes), or nothing."""

    def parse(self, text: str, name: str) -> str:
        header = text.strip()
        if header and not re.fullmatch(r"[A-Za-z0-9-]+", header):
            raise ImproperlyConfigured(f"{name} must be a header name, not {header!r}")
        return header


class FernetKeys(Parser):
    """Comma-separated Fernet keys (32 url-safe base64 bytes, as ``Fernet.generate_key()`` writes
    them) -> a tuple of them; empty: none. Checked with the standard library (this module is
    imported before Django, cryptography is not); a bad key is named by its place, never shown."""

    type = tuple[str, ...]
    KEY = re.compile(r"[A-Za-z0-9_-]{43}=")

    def parse(self, text: str, name: str) -> tuple[str, ...]:
        return self.check(tuple(key.strip() for key in text.split(",") if key.strip()), name)

    def check(self, value: Any, name: str) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(key, str) for key in value):
            self.refuse(value, name)
        keys = tuple(key.strip() for key in value if key.strip())
        for place, key in enumerate(keys, 1):
            if not self.KEY.fullmatch(key) or len(base64.urlsafe_b64decode(key)) != 32:
                raise ImproperlyConfigured(
                    f"{name}: key {place} of {len(keys)} is not a Fernet key (32 url-safe base64-encoded bytes, "
                    "as scripts/make-env.sh writes)")
        if len(set(keys)) != len(keys):
            raise ImproperlyConfigured(f"{name} names a key twice")
        return keys


class DatabaseUrl(Parser):
    """A dj-database-url URL of a PostgreSQL database -> Django's DATABASES entry."""

    type = dict

    def parse(self, text: str, name: str) -> Mapping[str, Any]:
        try:
            database = dj_database_url.parse(text.strip())
        except ValueError:
            database = {"ENGINE": "an unknown kind of database"}
        if database.get("ENGINE") != "django.db.backends.postgresql":
            raise ImproperlyConfigured(
                f"{name} must name a PostgreSQL database (postgres://...), not {database.get('ENGINE')}")
        return database
