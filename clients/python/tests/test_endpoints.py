"""Endpoints, teams, keys and the audit log through the client against the real platform."""

import pytest

from delayclient import Forbidden, NotFound


def test_create_update_and_flow_limits(client, unique):
    made = client.endpoints.create(f"hook-{unique}", handler="webhook",
                                   handler_target="http://127.0.0.1:9/receiver")
    assert made.webhook_secret.startswith("whsec_") and made.queue.endswith(f"--hook-{unique}")
    limited = client.endpoints.set_flow_limits(made.name, max_deliveries_per_second=50, max_concurrent=4)
    assert (limited.max_deliveries_per_second, limited.max_concurrent) == (50, 4)
    unlimited = client.endpoints.set_flow_limits(made.name, max_concurrent=None)
    assert (unlimited.max_deliveries_per_second, unlimited.max_concurrent) == (50, None)
    keyed = client.endpoints.set_flow_limits(made.name, max_deliveries_per_second_per_key=5, max_concurrent_per_key=2)
    assert (keyed.max_deliveries_per_second_per_key, keyed.max_concurrent_per_key, keyed.max_deliveries_per_second) \
        == (5, 2, 50)
    assert client.endpoints.get(made.name).max_concurrent_per_key == 2
    assert client.endpoints.update(made.name, webhook_timeout_seconds=2.5).webhook_timeout_seconds == 2.5
    assert client.endpoints.get(made.name).webhook_secret is None  # never shown again
    assert made.name in [e.name for e in client.endpoints.list()]


def test_rotate_secret_and_pause(client, unique):
    made = client.endpoints.create(f"rot-{unique}", handler="webhook", handler_target="http://127.0.0.1:9/")
    rotated = client.endpoints.rotate_secret(made.name, previous_valid_seconds=60)
    assert rotated.webhook_secret != made.webhook_secret and rotated.previous_valid_until is not None
    assert client.endpoints.deactivate(made.name).is_active is False
    assert client.endpoints.activate(made.name).is_active is True
    with pytest.raises(NotFound):
        client.endpoints.get(f"missing-{unique}")


def test_teams_keys_and_audit(client, platform, unique):
    (team,) = [t for t in client.teams.list() if t.name == platform.team]
    assert client.teams.get(team.name).quotas
    assert isinstance(list(client.teams.members(team.name)), list)
    with pytest.raises(Forbidden):  # keys make no keys: people only
        client.keys.create(scopes=["read"], team=team.name)
    with pytest.raises(Forbidden):
        list(client.keys.list())
    # invitations and own keys are a person's: a team's key reaches each route and is refused
    for people_only in (lambda: client.teams.invite(team.name, f"someone-{unique}", "member"),
                        lambda: list(client.teams.invitations(team.name)),
                        lambda: client.teams.revoke_invitation(team.name, 1),
                        lambda: list(client.invitations.list()), lambda: client.invitations.accept(1),
                        lambda: client.invitations.decline(1), lambda: list(client.keys.mine()),
                        lambda: client.keys.revoke_mine("dpk_abcdefgh")):
        with pytest.raises(Forbidden):
            people_only()
    client.endpoints.create(f"audited-{unique}")
    events = client.audit.list(team=team.name, action="endpoint.create").first(50)
    assert any(e.object_repr and f"audited-{unique}" in e.object_repr for e in events)
