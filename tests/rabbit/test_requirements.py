"""The broker requirements provision_delays --verify checks (rabbit/requirements.py), pure."""

from rabbit.redelivery import POLICY, POLICY_NAME
from rabbit.requirements import BrokerFacts, requirements_check

ENABLED = {"quorum_queue": "enabled", "stream_queue": "enabled"}
UNLIMITED = ({"name": POLICY_NAME, "vhost": "/", **POLICY},)


def lines(facts, quorum=True):
    return [r.line() for r in requirements_check(facts, quorum=quorum)]


def test_a_broker_before_3_10_fails_with_the_way_out():
    (version,) = lines(BrokerFacts("3.9.29", {}, {}), quorum=False)
    assert version.startswith("FAIL: RabbitMQ version: 3.9.29 (3.10.0 or later needed); fix: upgrade RabbitMQ")


def test_classic_cascades_need_only_the_version():
    assert lines(BrokerFacts("3.10.8", {}, {"rabbit@a": 180_000}), quorum=False) == [
        "ok: RabbitMQ version: 3.10.8 (3.10.0 or later needed)"]


def test_a_disabled_flag_fails_and_names_the_command():
    checks = requirements_check(BrokerFacts("3.10.8", {**ENABLED, "stream_queue": "disabled"}, {}), quorum=True)
    failed = [c for c in checks if c.ok is False]
    assert [c.line() for c in failed] == [
        "FAIL: feature flag stream_queue: disabled; fix: rabbitmqctl enable_feature_flag stream_queue"]


def test_from_4_0_an_unlisted_flag_is_always_on():
    assert all(c.ok for c in requirements_check(BrokerFacts("4.3.0", {}, {}, UNLIMITED), quorum=True))


def test_the_default_confirm_timeout_is_a_warning_with_the_setting_to_change():
    (timeout,) = [c for c in requirements_check(BrokerFacts("3.10.8", ENABLED, {"rabbit@a": 180_000}), quorum=True)
                  if "confirm_timeout" in c.name]
    assert timeout.ok is False and timeout.warning
    assert timeout.line().startswith("warning: dead_letter_worker_publisher_confirm_timeout on rabbit@a: 180,000 ms")
    assert "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}]." in timeout.line()


def test_a_timeout_within_bounds_passes_and_an_unreadable_one_says_how_to_look():
    checks = requirements_check(BrokerFacts("3.10.8", ENABLED, {"rabbit@a": 5000, "rabbit@b": None}), quorum=True)
    by_node = {c.name.rsplit(" ", 1)[-1]: c for c in checks if "confirm_timeout" in c.name}
    assert by_node["rabbit@a"].ok is True
    assert by_node["rabbit@b"].ok is None and "rabbitmqctl -n rabbit@b eval" in by_node["rabbit@b"].line()


def redelivery(facts):
    (check,) = [c for c in requirements_check(facts, quorum=False) if "handed back" in c.name]
    return check


def test_3_x_has_no_delivery_limit_to_check():
    assert not [c for c in requirements_check(BrokerFacts("3.13.7", {}, {}), quorum=True) if "handed back" in c.name]


def test_on_4_x_a_missing_policy_fails_with_the_command_that_sets_it():
    check = redelivery(BrokerFacts("4.0.5", {}, {}))
    assert check.failed
    assert check.line() == ("FAIL: quorum queues keep a message handed back 20 times: policy dp-unlimited-redelivery "
                            "missing (RabbitMQ 4.0.5 drops such a message); fix: run provision_delays")


def test_on_4_x_a_changed_policy_fails():
    changed = ({**UNLIMITED[0], "definition": {"delivery-limit": 50}},)
    assert "policy dp-unlimited-redelivery differs" in redelivery(BrokerFacts("4.1.0", {}, {}, changed)).line()


def test_on_4_x_queues_another_policy_still_limits_are_named():
    queues = ({"name": "orders", "type": "quorum", "delivery_limit": 20},
              {"name": "mail", "type": "quorum", "delivery_limit": "unlimited"},
              {"name": "dp.delay-level-00", "type": "classic"},
              {"name": "fresh", "type": "quorum"})  # no statistics yet: not counted
    check = redelivery(BrokerFacts("4.0.5", {}, {}, UNLIMITED, queues))
    assert check.failed and "1 quorum queue(s) still limited: orders;" in check.line()
    assert '"delivery-limit": -1' in check.line()


def test_on_4_x_the_policy_with_nothing_limited_passes():
    queues = ({"name": "mail", "type": "quorum", "delivery_limit": "unlimited"},)
    assert redelivery(BrokerFacts("4.0.5", {}, {}, UNLIMITED, queues)).ok is True
