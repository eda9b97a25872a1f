"""Where the modules without a mirror test are tested: the declaration that tests/test_layout.py
reads for every module of scheduling/, rabbit/ and topology/ of 100 lines or more that has no
``tests/<same path>/test_<module>.py``.

One mapping in one file rather than a ``Tested in:`` line in each module's docstring: the modules
move and split (issue 50 moves code between domains), and a stale entry here fails the layout test
by name, while a docstring travels unread with code copied elsewhere; it also keeps the test side's
knowledge out of the platform's modules. Grep it by the module's path. A module leaves this file
when it gets its mirror test (the layout test then fails until the entry is removed).
"""

TESTED_IN: dict[str, tuple[str, ...]] = {
    # the broker's one home: sessions, declares, the management API, against the real broker
    "rabbit/broker.py": ("tests/rabbit/test_session.py", "tests/rabbit/test_publish.py"),
    "rabbit/declare.py": ("tests/rabbit/test_session.py",),
    "rabbit/management.py": ("tests/rabbit/test_probe.py", "tests/scheduling/management/test_provision_delays.py"),
    # admin pages: through the admin's own views (test client) and a real browser
    "scheduling/admin/base.py": ("tests/scheduling/admin/test_lookups.py", "tests/scheduling/admin/test_permissions.py"),
    "scheduling/admin/forms.py": ("tests/scheduling/admin/test_endpoints.py", "tests/browser/test_admin_browser.py"),
    "scheduling/admin/teams.py": ("tests/browser/test_teams_browser.py",),
    # the teams' API: its views and serializers through the API
    "scheduling/api/team_serializers.py": ("tests/scheduling/api/test_teams.py", "tests/scheduling/api/test_invitations.py"),
    "scheduling/api/team_views.py": ("tests/scheduling/api/test_teams.py", "tests/scheduling/api/test_own_keys.py",
                                     "tests/scheduling/api/test_cross_team_walk.py"),
    # Celery's edge: tasks are thin, each calls one service tested in its domain
    "scheduling/celery/delayed.py": ("tests/scheduling/celery/test_services.py", "tests/e2e/test_celery_integration.py"),
    "scheduling/celery/tasks.py": ("tests/scheduling/api/test_message_views.py", "tests/e2e/test_worker.py"),
    # settings: parsed and declared once, checked through conf
    "scheduling/config/parsers.py": ("tests/scheduling/config/test_conf.py",),
    "scheduling/config/specs.py": ("tests/scheduling/config/test_conf.py",),
    # models hold data and clean() invariants: tested through the services that write them
    "scheduling/models/endpoints.py": ("tests/scheduling/endpoints/test_services.py",),
    "scheduling/models/messages.py": ("tests/scheduling/messages/test_services.py", "tests/scheduling/models/test_querysets.py"),
    "scheduling/models/schedules.py": ("tests/scheduling/schedules/test_services.py",),
    "scheduling/models/delivery.py": ("tests/scheduling/delivery/test_webhook_calls.py",
                                      "tests/scheduling/delivery/test_recorder.py"),
    "scheduling/models/teams.py": ("tests/scheduling/teams/test_services.py", "tests/scheduling/api/test_invitations.py"),
    "scheduling/delivery/webhooks.py": ("tests/scheduling/delivery/test_webhook_engine.py",
                                        "tests/scheduling/delivery/test_webhook_calls.py"),
    "scheduling/messages/dashboard.py": ("tests/scheduling/messages/test_selectors.py",),
    "scheduling/messages/notification_outbox.py": ("tests/scheduling/notifications/test_services.py",
                                           "tests/scheduling/notifications/test_expired.py"),
    "scheduling/retention/columns.py": ("tests/scheduling/retention/test_services.py",
                                        "tests/scheduling/reports/test_export.py"),
    "scheduling/retention/parquet.py": ("tests/scheduling/retention/test_services.py",),
    # the prune's parts, through the prune (retention/services.py) that runs them in order
    "scheduling/retention/archives.py": ("tests/scheduling/retention/test_services.py",
                                         "tests/reliability/test_prune_killed.py"),
    "scheduling/retention/table_prunes.py": ("tests/scheduling/retention/test_events.py",
                                             "tests/scheduling/retention/test_orphan_copies.py",
                                             "tests/scheduling/retention/test_services.py"),
    "scheduling/teams/invitations.py": ("tests/scheduling/api/test_invitations.py",),
    "scheduling/teams/selectors.py": ("tests/scheduling/teams/test_access.py", "tests/scheduling/api/test_cross_team_walk.py"),
    # management commands: tests/scheduling/management/test_<command>.py (no commands/ level)
    "scheduling/management/commands/_base.py": ("tests/scheduling/management/test_base.py",),
    "scheduling/management/commands/provision_delays.py": ("tests/scheduling/management/test_provision_delays.py",),
    "scheduling/management/commands/prune_messages.py": ("tests/scheduling/retention/test_services.py",
                                                         "tests/reliability/test_prune_killed.py"),
    "scheduling/management/commands/reconcile_after_restore.py": (
        "tests/scheduling/management/test_reconcile_after_restore.py",),
    # the worker's processes: a real worker, a real broker, its loop's parts through what they deliver
    "scheduling/worker/loop.py": ("tests/e2e/test_worker.py", "tests/e2e/test_flow_control.py",
                                  "tests/e2e/test_ordering.py", "tests/e2e/test_expiry.py",
                                  "tests/e2e/test_loop_processes.py"),
    "scheduling/worker/fanning.py": ("tests/e2e/test_fanout.py",),
    "scheduling/worker/calls.py": ("tests/e2e/test_webhook_engine.py", "tests/e2e/test_flow_control.py",
                                   "tests/e2e/test_flow_control_by_key.py", "tests/e2e/test_tracing.py"),
    "scheduling/worker/processes.py": ("tests/e2e/test_loop_processes.py",),
    "topology/diff.py": ("tests/topology/test_definitions_and_diff.py", "tests/topology/test_shards.py"),
}
