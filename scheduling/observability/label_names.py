"""Team, endpoint and version names by id, learnt once per process: the metrics' labels and the
delivery log's lines name them on the hot path without a query (none of the three names ever
changes, nor an endpoint's team). Two teams may both have an endpoint ``billing``: the team keeps
their figures apart."""

from __future__ import annotations

from scheduling.models import Endpoint, TopologyVersion

_endpoints: dict[int, tuple[str, str]] = {}  # endpoint id -> (team, endpoint)
_versions: dict[int, str] = {}


def learn(rows) -> None:
    """Read the names of ids not seen before (one query each, then never again); ``rows``: anything
    with endpoint_id and topology_id. Raises the database's error; callers fall back to ids."""
    if missing := {row.endpoint_id for row in rows} - _endpoints.keys():
        _endpoints.update(_endpoint_names(missing))
    if missing := {row.topology_id for row in rows} - _versions.keys():
        _versions.update(TopologyVersion.objects.filter(id__in=missing).values_list("id", "name"))


def learn_endpoints(ids) -> None:
    """Read the names of endpoint ids not seen before (what has no version: a circuit, a disable)."""
    if missing := set(ids) - _endpoints.keys():
        _endpoints.update(_endpoint_names(missing))


def _endpoint_names(ids) -> dict[int, tuple[str, str]]:
    """Endpoint id -> (its team's name, its name), in one query."""
    return {id_: (team, name) for id_, team, name
            in Endpoint.objects.filter(id__in=ids).values_list("id", "team__name", "name")}


def of(row) -> tuple[str, str, str]:
    """(team, endpoint, version) of a row; for names not learnt the ids stand in, and the team is
    empty (an endpoint id is unique across teams)."""
    team, endpoint = _endpoints.get(row.endpoint_id, ("", str(row.endpoint_id)))
    return team, endpoint, _versions.get(row.topology_id, str(row.topology_id))


def forget() -> None:
    """For tests: learn again from the database."""
    _endpoints.clear()
    _versions.clear()
