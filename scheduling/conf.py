"""The platform's settings as one typed object, and the broker they name.

Each setting is declared once, in ``scheduling/setting_specs.py`` (its variable, parser,
default, check and doc); ``delayplatform/settings.py`` reads the environment through those specs
into Django settings, and :func:`conf` is made from the same specs: one field per spec marked
``conf``, read back from Django settings. A value settings.py parsed is only checked here (a CIDR
list is a tuple of networks already); text, as a test may set it, is parsed as the environment's
would be. ``override_settings`` in tests works: the object is rebuilt when a setting changes.
"""

from __future__ import annotations

import functools
from dataclasses import make_dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

import rabbit
from topology import cascade

from . import setting_specs

_SPECS = tuple(spec for spec in setting_specs.SPECS if spec.conf)

DelaySettings = make_dataclass(
    "DelaySettings", [(spec.key, spec.parse.type) for spec in _SPECS], frozen=True,
    namespace={"__doc__": "The platform's settings (scheduling/setting_specs.py):\n\n" + "\n".join(
        f"- {spec.key}: {spec.doc} ({spec.env})" for spec in _SPECS)},
)
DelaySettings.__module__ = __name__


def setting_name(field: str) -> str:
    """The variable (and Django setting) behind a field of conf(), for messages that name it."""
    return setting_specs.variable(field)


def _read() -> DelaySettings:
    values = {}
    for spec in _SPECS:
        try:
            value = getattr(settings, spec.env)
        except AttributeError:
            raise ImproperlyConfigured(f"the setting {spec.env} is missing") from None
        values[spec.key] = spec.coerce(value)
    if values["archive_dir"] is None:  # unset: beside the report's files, wherever those are
        values["archive_dir"] = values["accuracy_report_dir"] / "archive"
    return DelaySettings(**values)


@functools.cache
def conf() -> DelaySettings:
    return _read()


def configured_version(name: str, *, prefix: str | None = None, levels: int | None = None) -> cascade.Version:
    """The cascade of a version as this platform runs it: the built-in version with the shard
    count DELAY_SHARDS gives it (under another prefix or level count, for a TopologyVersion row
    or a command's --prefix/--levels). Everything that publishes, declares, verifies, explains or
    drains a cascade gets its Version here, so all of them agree on the shards."""
    return _version(name, prefix, levels, conf().shards.get(name, 1))


@functools.lru_cache(maxsize=64)
def _version(name: str, prefix: str | None, levels: int | None, shards: int) -> cascade.Version:
    """Built once per (name, prefix, levels, shards): scheduling asks for it per batch."""
    return cascade.get_version(name).with_(prefix=prefix, levels=levels, shards=shards)


@functools.cache
def _platform_broker(url: str, management_url: str) -> rabbit.Broker:
    return rabbit.Broker(url, management_url)


def broker(url: str | None = None) -> rabbit.Broker:
    """The platform's broker (one instance per process, so the relay keeps its connections), or
    another one by URL (transfer_delays' target, provision_delays --broker)."""
    c = conf()
    if url is None or url == c.broker_url:
        return _platform_broker(c.broker_url, c.management_url)
    return rabbit.Broker(url)


def _reset(**kwargs) -> None:
    conf.cache_clear()


setting_changed.connect(_reset, dispatch_uid="scheduling.conf")
