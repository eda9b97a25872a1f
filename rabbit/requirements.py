"""What a cascade needs of the broker itself, checked as NServiceBus's ``delays verify`` does: its
version, the feature flags of quorum queues and at-least-once dead-lettering, and the dead-letter
worker's confirm timeout. Pure checks over facts read by :func:`broker_facts`
(docs/operations/rabbitmq-versions.md says where each comes from)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from .management import Management
from .redelivery import POLICY, POLICY_NAME, limited_queues, limits_redelivery, version_tuple

MINIMUM = (3, 10, 0)  # message TTL and at-least-once dead-lettering on quorum queues
QUORUM_FLAGS = ("quorum_queue", "stream_queue")  # stream_queue: at-least-once dead-lettering on 3.10-3.13
CONFIRM_TIMEOUT_KEY = "dead_letter_worker_publisher_confirm_timeout"
CONFIRM_TIMEOUT_MAX_MS = 10_000  # the broker's default is 180,000 ms
CONFIRM_TIMEOUT_ADVISED_MS = 5_000  # docs/operations/cluster.md; scripts/rabbitmq-cluster.sh sets it


@dataclass(frozen=True)
class BrokerFacts:
    version: str  # "3.10.8"
    flags: dict[str, str]  # feature flag -> state ("enabled", "disabled", "unavailable")
    confirm_timeouts: dict[str, int | None]  # node -> ms; None: not readable from here
    policies: tuple = ()  # the vhost's policies (management API listing)
    queues: tuple = ()  # the vhost's queues (listing: type, delivery_limit on 4.x)


@dataclass(frozen=True)
class Requirement:
    name: str
    ok: bool | None  # None: could not be checked from here
    found: str
    fix: str = ""
    warning: bool = False  # works, with less safety: reported, does not fail verify

    @property
    def failed(self) -> bool:
        """Unmet, and not only a warning: verify fails."""
        return self.ok is False and not self.warning

    def line(self) -> str:
        mark = "ok" if self.ok else ("not checked" if self.ok is None else ("warning" if self.warning else "FAIL"))
        return f"{mark}: {self.name}: {self.found}" + (f"; fix: {self.fix}" if self.fix and not self.ok else "")


def requirements_check(facts: BrokerFacts, *, quorum: bool) -> list[Requirement]:
    """One line per requirement of a cascade (``quorum``: of quorum queues with at-least-once
    dead-lettering, as v2 and v3 are)."""
    found = version_tuple(facts.version)
    checks = [Requirement(
        "RabbitMQ version", None if found is None else found >= MINIMUM,
        f"{facts.version or 'unknown'} (3.10.0 or later needed)",
        "upgrade RabbitMQ (docs/operations/rabbitmq-versions.md gives the path)")]
    if limits_redelivery(facts.version):
        checks.append(redelivery_requirement(facts))
    if not quorum:
        return checks
    for flag in QUORUM_FLAGS:
        state = facts.flags.get(flag)
        if state is None and found is not None and found >= (4, 0, 0):
            checks.append(Requirement(f"feature flag {flag}", True, "required and always on since 4.0"))
            continue
        checks.append(Requirement(f"feature flag {flag}", state == "enabled", state or "not listed",
                                  f"rabbitmqctl enable_feature_flag {flag}"))
    for node, ms in sorted(facts.confirm_timeouts.items()):
        fix = (f"in advanced.config [{{rabbit, [{{{CONFIRM_TIMEOUT_KEY}, {CONFIRM_TIMEOUT_ADVISED_MS}}}]}}]. "
               "and restart the node")
        if ms is None:
            checks.append(Requirement(f"{CONFIRM_TIMEOUT_KEY} on {node}", None,
                                      "not readable here (rabbitmqctl cannot reach the node)",
                                      f"rabbitmqctl -n {node} eval 'application:get_env(rabbit, {CONFIRM_TIMEOUT_KEY}).' "
                                      f"should say at most {CONFIRM_TIMEOUT_MAX_MS}"))
            continue
        checks.append(Requirement(
            f"{CONFIRM_TIMEOUT_KEY} on {node}", ms <= CONFIRM_TIMEOUT_MAX_MS,
            f"{ms:,} ms: a hop a level's next queue does not confirm (its leader just died) is sent again only "
            f"after this long, so those messages can be that late", fix, warning=True))
    return checks


def redelivery_requirement(facts: BrokerFacts) -> Requirement:
    """On 4.x: the platform's policy against quorum queues' delivery limit is in place, and no
    quorum queue of the vhost still has a limit (another policy of higher priority, an argument)."""
    name = "quorum queues keep a message handed back 20 times"
    policy = next((p for p in facts.policies if p.get("name") == POLICY_NAME), None)
    if policy is None or any(policy.get(k) != POLICY[k] for k in ("pattern", "apply-to", "definition")):
        return Requirement(name, False, f"policy {POLICY_NAME} {'differs' if policy else 'missing'} "
                                        f"(RabbitMQ {facts.version} drops such a message)", "run provision_delays")
    limited = limited_queues(list(facts.queues))
    if limited:
        shown = ", ".join(limited[:5]) + (f" and {len(limited) - 5} more" if len(limited) > 5 else "")
        return Requirement(name, False, f"{len(limited)} quorum queue(s) still limited: {shown}",
                           'another policy wins there: add "delivery-limit": -1 to its definition')
    return Requirement(name, True, f"policy {POLICY_NAME}: no delivery limit")


def _confirm_timeout(node: str) -> int | None:
    """The node's setting, read with rabbitmqctl (the management API does not show the
    application environment); None where the CLI is missing or cannot reach the node."""
    if not shutil.which("rabbitmqctl"):
        return None
    try:
        result = subprocess.run(["rabbitmqctl", "-q", "-n", node, "eval",
                                 f"application:get_env(rabbit, {CONFIRM_TIMEOUT_KEY})."],
                                capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\{ok,\s*(\d+)\}", result.stdout)
    return int(match.group(1)) if result.returncode == 0 and match else None


def broker_facts(management: Management, vhost: str) -> BrokerFacts:
    overview = management.overview()
    version = overview.get("rabbitmq_version") or overview.get("product_version") or ""
    flags = {f["name"]: f.get("state", "") for f in management.feature_flags()}
    nodes = [n["name"] for n in management.nodes() if n.get("running")]
    limited = limits_redelivery(version)
    return BrokerFacts(version, flags, {node: _confirm_timeout(node) for node in nodes},
                       tuple(management.policies(vhost)) if limited else (),
                       tuple(management.queues(vhost)) if limited else ())
