"""The broker requirements provision_delays --verify checks (rabbit/requirements.py), pure."""

from rabbit.requirements import BrokerFacts, requirements_check

ENABLED = {"quorum_queue": "enabled", "stream_queue": "enabled"}


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
    assert all(c.ok for c in requirements_check(BrokerFacts("4.3.0", {}, {}), quorum=True))


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
