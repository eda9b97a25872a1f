"""Who may do what (pure): each role's actions, a key's scopes bounding them, a team key never
managing keys or members, an operator everywhere; queue names no team can bend into another's."""

import pytest

from scheduling.core.caller import Caller
from scheduling.core.roles import ALL_SCOPES, Action, parse_scopes
from scheduling.teams import queues
from scheduling.teams.keys import key_digest, key_generate, key_matches, key_prefix

A, B = 1, 2
EXPECTED = {  # role -> the actions it allows
    "viewer": {Action.READ},
    "member": {Action.READ, Action.SCHEDULE, Action.CANCEL, Action.SCHEDULES, Action.TASKS},
    "admin": set(Action),
}


@pytest.mark.parametrize("role", EXPECTED)
def test_each_role_allows_its_actions_in_its_team_only(role):
    caller = Caller(name="u", user_id=7, roles={A: role})
    assert {action for action in Action if caller.may(action, A)} == EXPECTED[role]
    assert not any(caller.may(action, B) for action in Action)
    assert caller.team_ids(Action.READ) == {A} and caller.team_ids(Action.ENDPOINTS) == ({A} if role == "admin" else set())


def test_a_key_s_scopes_bound_its_user_s_role():
    caller = Caller(name="u (key dpk_x)", user_id=7, key_id=3, roles={A: "admin"}, scopes=frozenset({"read", "cancel"}))
    assert {action for action in Action if caller.may(action, A)} == {Action.READ, Action.CANCEL, Action.KEYS,
                                                                      Action.MEMBERS}


def test_a_team_key_is_its_scopes_in_its_team_and_never_keys_or_members():
    key = Caller(name="key dpk_x", key_id=3, roles={A: "admin"}, scopes=ALL_SCOPES, person=False)
    assert {action for action in Action if key.may(action, A)} == set(Action) - {Action.KEYS, Action.MEMBERS}
    assert not key.may(Action.READ, B) and key.team_ids(Action.KEYS) == set()


def test_an_operator_may_everything_everywhere_within_its_key_s_scopes():
    operator = Caller(name="ops", user_id=1, operator=True)
    assert all(operator.may(action, B) for action in Action) and operator.team_ids(Action.AUDIT) is None
    reading = Caller(name="ops (key)", user_id=1, operator=True, scopes=frozenset({"read"}))
    assert reading.may(Action.READ, B) and not reading.may(Action.CANCEL, B)
    assert reading.team_ids(Action.CANCEL) == set()


def test_scopes_parse_all_and_refuse_an_unknown_one():
    assert parse_scopes(["all"]) == ALL_SCOPES and parse_scopes(["read", "WRITE "]) == {"read", "write"}
    with pytest.raises(ValueError, match="unknown scope 'admin'"):
        parse_scopes(["admin"])
    with pytest.raises(ValueError, match="at least one"):
        parse_scopes([])


def test_a_key_is_random_matched_by_its_digest_and_listed_by_its_prefix():
    key = key_generate()
    assert key.startswith("dpk_") and len(key) >= 40 and key != key_generate()
    assert key_prefix(key) == key[:12] and key_matches(key, key_digest(key))
    assert not key_matches(key + "x", key_digest(key)) and key_digest(key) != key
    assert key_prefix("0123456789abcdef0123456789abcdef01234567") == "01234567"  # a migrated DRF token


@pytest.mark.parametrize(("team", "name"), [("a", "b-c"), ("a-b", "c"), ("a", "-b"), ("a", "b--c"), ("x1", "y.z")])
def test_a_queue_names_its_team_and_endpoint_unambiguously(team, name):
    queue = queues.queue_of(team, name)
    head, _, tail = queue.partition(queues.SEPARATOR)
    assert (head, tail) == (team, name)  # a team name never holds "--": the first "--" ends it
    assert queues.TEAM_NAMESPACE.match(queue)


def test_two_teams_never_share_a_queue():
    pairs = [("a", "b-c"), ("a-b", "c"), ("a", "b--c"), ("a-b", "-c")]
    assert len({queues.queue_of(t, n) for t, n in pairs}) == len(pairs)


@pytest.mark.parametrize(("queue", "consumed", "why"), [
    ("dp.relay", False, "platform's own"), ("amq.gen-x", False, "broker's"), ("nsb.v2.delay-level-01", False, "nsb.v2."),
    ("billing--invoices", False, "form of a team's queue"), ("celery", True, "Celery task queue"),
    ("my.relay", False, "platform's own queues"),
    ("x.shop--celery.pidbox", False, "team's worker control queue"),  # team shop's user would reach it
])
def test_an_exact_queue_is_never_the_platform_s_the_broker_s_or_a_team_s(queue, consumed, why):
    problem = queues.exact_queue_problem(queue, platform_queues=["my.relay"], prefixes=["dp.", "nsb.v2."],
                                         celery_queues=["celery"], consumed=consumed)
    assert problem and why in problem


def test_an_operator_may_bind_a_celery_queue_for_celery_tasks_and_a_foreign_queue():
    args = {"platform_queues": ["dp.relay"], "prefixes": ["dp."], "celery_queues": ["celery"]}
    assert queues.exact_queue_problem("celery", consumed=False, **args) is None  # DelayedTask's queue
    assert queues.exact_queue_problem("Billing.Endpoint", consumed=True, **args) is None  # NServiceBus interop


@pytest.mark.parametrize("name", ["dp.relay", "amq.x", "dp.v3.delay-level-01", "celeryev", "celeryev.x",
                                  "celery.pidbox"])
def test_an_endpoint_name_that_reads_as_a_platform_or_broker_queue_is_refused(name):
    assert queues.name_problem(name)
    assert queues.name_problem("billing") is None
    assert queues.name_problem("celery") is None and queues.name_problem("celeryevents") is None
