"""A small client of the RabbitMQ management HTTP API.

AMQP cannot list bindings or read a queue's arguments, so verification and per-vhost test
isolation go through the management plugin (``rabbitmq-plugins enable rabbitmq_management``).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import requests

from .errors import ManagementUnavailable
from .urls import node_urls


class Management:
    """``url`` may list several nodes (``http://a:15672;http://b:15672``): a request goes to the
    node that answered last and fails over to the others when it cannot be reached."""

    def __init__(self, url: str, timeout: float = 10.0):
        self.bases, self.auths = [], []
        for node in node_urls(url):
            parts = urlsplit(node)
            self.bases.append(f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}{parts.path.rstrip('/')}/api")
            self.auths.append((parts.username or "guest", parts.password or "guest"))
        self.timeout = timeout
        self._current = 0

    @property
    def base(self) -> str:
        return self.bases[self._current]

    def _send(self, method: str, path: str, **kwargs) -> requests.Response:
        for step in range(len(self.bases)):
            index = (self._current + step) % len(self.bases)
            try:
                response = requests.request(method, self.bases[index] + path, auth=self.auths[index],
                                            timeout=self.timeout, **kwargs)
            except requests.RequestException as exc:
                failure = exc
                continue
            self._current = index
            return response
        raise ManagementUnavailable(
            f"cannot reach the RabbitMQ management API at {'; '.join(self.bases)} ({type(failure).__name__}); "
            "enable it with: rabbitmq-plugins enable rabbitmq_management"
        ) from None

    def _request(self, method: str, path: str, **kwargs):
        response = self._send(method, path, **kwargs)
        if response.status_code == 404 and method == "GET":
            return None
        if response.status_code >= 400:
            raise ManagementUnavailable(
                f"{method} {path} answered {response.status_code}: {response.text[:200]}"
            )
        return response.json() if response.content else None

    @staticmethod
    def _v(vhost: str) -> str:
        return quote(vhost, safe="")

    def exchanges(self, vhost: str) -> list[dict]:
        return self._request("GET", f"/exchanges/{self._v(vhost)}") or []

    def queues(self, vhost: str) -> list[dict]:
        return self._request("GET", f"/queues/{self._v(vhost)}") or []

    def queue(self, vhost: str, name: str) -> dict | None:
        return self._request("GET", f"/queues/{self._v(vhost)}/{quote(name, safe='')}")

    def queue_depths(self, vhost: str) -> dict[str, dict]:
        """Queue name -> message counts (messages, messages_ready, messages_unacknowledged); a
        count is missing until the broker has collected the queue's first statistics."""
        columns = "name,messages,messages_ready,messages_unacknowledged"
        listed = self._request("GET", f"/queues/{self._v(vhost)}", params={"columns": columns}) or []
        return {q["name"]: q for q in listed}

    def bindings_from(self, vhost: str, exchange: str) -> list[dict]:
        """Bindings whose source is this exchange."""
        path = f"/exchanges/{self._v(vhost)}/{quote(exchange, safe='')}/bindings/source"
        return self._request("GET", path) or []

    def bindings(self, vhost: str) -> list[dict]:
        return self._request("GET", f"/bindings/{self._v(vhost)}") or []

    def listings(self, vhost: str) -> tuple[list[dict], list[dict], list[dict]]:
        """(exchanges, queues, bindings) of a vhost: what topology.diff compares a plan with."""
        return self.exchanges(vhost), self.queues(vhost), self.bindings(vhost)

    def create_vhost(self, vhost: str, user: str = "guest") -> None:
        self._request("PUT", f"/vhosts/{self._v(vhost)}", json={})
        self._request(
            "PUT",
            f"/permissions/{self._v(vhost)}/{quote(user, safe='')}",
            json={"configure": ".*", "write": ".*", "read": ".*"},
        )

    def delete_vhost(self, vhost: str) -> None:
        try:
            self._request("DELETE", f"/vhosts/{self._v(vhost)}")
        except ManagementUnavailable as exc:
            if " 404:" not in str(exc):
                raise

    # --- users and their permissions (a team's own user: scheduling/teams/services.py) ----------

    def user(self, name: str) -> dict | None:
        return self._request("GET", f"/users/{quote(name, safe='')}")

    def put_user(self, name: str, password: str, tags: str = "") -> None:
        """Make the user, or set its password (connections it has stay open: AMQP checks a
        password when a connection opens). ``tags`` "": no management or administrator rights."""
        self._request("PUT", f"/users/{quote(name, safe='')}", json={"password": password, "tags": tags})

    def delete_user(self, name: str) -> None:
        """Remove the user (its connections are closed); one that is not there is left so."""
        response = self._send("DELETE", f"/users/{quote(name, safe='')}")
        if response.status_code >= 400 and response.status_code != 404:
            raise ManagementUnavailable(f"DELETE /users/{name} answered {response.status_code}: {response.text[:200]}")

    def put_permissions(self, vhost: str, user: str, *, configure: str, write: str, read: str) -> None:
        self._request("PUT", f"/permissions/{self._v(vhost)}/{quote(user, safe='')}",
                      json={"configure": configure, "write": write, "read": read})

    def vhost_permissions(self, vhost: str) -> list[dict]:
        """Each user's permissions on the vhost (``user``, ``configure``, ``write``, ``read``)."""
        return self._request("GET", f"/vhosts/{self._v(vhost)}/permissions") or []

    def vhost_topic_permissions(self, vhost: str) -> list[dict]:
        """Each user's topic permissions on the vhost (``user``, ``exchange``, ``write``, ``read``)."""
        return self._request("GET", f"/vhosts/{self._v(vhost)}/topic-permissions") or []

    def users(self) -> list[dict]:
        return self._request("GET", "/users") or []

    def nodes(self) -> list[dict]:
        """The cluster's nodes with their figures (``name``, ``mem_used``, ``running`` …)."""
        return self._request("GET", "/nodes") or []

    def overview(self) -> dict:
        """The broker's version (``rabbitmq_version``) and cluster-wide figures."""
        return self._request("GET", "/overview") or {}

    def feature_flags(self) -> list[dict]:
        """Each feature flag with its ``state`` (enabled, disabled, unavailable)."""
        return self._request("GET", "/feature-flags") or []

    def policies(self, vhost: str) -> list[dict]:
        return self._request("GET", f"/policies/{self._v(vhost)}") or []

    def put_policy(self, vhost: str, name: str, body: dict) -> None:
        self._request("PUT", f"/policies/{self._v(vhost)}/{quote(name, safe='')}", json=body)

    def vhosts(self) -> list[str]:
        return [v["name"] for v in self._request("GET", "/vhosts") or []]

    def import_definitions(self, vhost: str, definitions: dict) -> None:
        """What ``rabbitmqctl import_definitions`` does, for one vhost."""
        body = {k: v for k, v in definitions.items() if k != "vhosts"}
        for key in ("exchanges", "queues", "bindings"):
            body[key] = [{k: v for k, v in item.items() if k != "vhost"} for item in body.get(key, [])]
        self._request("POST", f"/definitions/{self._v(vhost)}", json=body)
