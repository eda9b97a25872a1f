"""What a Celery worker of another codebase needs of the API (it has no database): claiming a task
that came out of the cascade before running it (POST /api/messages/<id>/claim/), cancelling every
waiting run of a task id (POST /api/messages/cancel-task/), and the retry count of a structured
task (its ``retries``, Celery's self.request.retries). Real PostgreSQL; no broker is touched."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.celery.services import celery_task_cancel
from scheduling.core.lifecycle import Status
from scheduling.messages import structured
from scheduling.messages.selectors import message_describe_gone
from scheduling.models import Endpoint, ScheduledMessage, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint_in(versions):
    """endpoint_in(team, handler="celery_queue") -> an endpoint of that team (no queue bound)."""

    def make(team="default", handler=Endpoint.Handler.CELERY_QUEUE):
        name = f"ep-{uuid.uuid4().hex[:10]}"
        return Endpoint.objects.create(name=name, queue=f"{team}--{name}", topology=versions["v2"], handler=handler,
                                       team=Team.objects.get_or_create(name=team)[0])

    return make


@pytest.fixture
def task(endpoint_in, versions):
    """task(endpoint=None, status=published, key=None) -> a task's row, due 20 ms ago."""

    def make(endpoint=None, status=Status.PUBLISHED, key=None):
        endpoint = endpoint or endpoint_in()
        row_id = uuid.uuid4()
        return ScheduledMessage.objects.create(
            id=row_id, endpoint=endpoint, topology=versions["v2"], payload={"task": "testapp.plain_receipt"},
            requested_delay_ms=0, due_at=timezone.now() - timedelta(milliseconds=20), status=status,
            idempotency_key=key or str(row_id), created_at=timezone.now() - timedelta(hours=1))

    return make


def claim(client, row_id, **body):
    return client.post(f"/api/messages/{row_id}/claim/", body, format="json")


def status_of(row) -> str:
    return ScheduledMessage.objects.get(id=row.id).status


# --- claim -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [Status.PENDING, Status.PUBLISHED])
def test_the_first_claim_runs_and_records_the_delivery_and_a_second_does_not_run(team_key, task, status):
    row = task(status=status)
    worker = team_key("default", "tasks")
    first = claim(worker, row.id, worker="celery@billing-1")
    assert first.status_code == 200, first.content
    assert first.json() == {"id": str(row.id), "status": "delivered", "run": True, "ordered": False}
    stored = ScheduledMessage.objects.get(id=row.id)
    assert stored.status == Status.DELIVERED and stored.delivery_count == 1
    assert stored.delivered_by == "celery@billing-1"
    again = claim(worker, row.id)
    assert again.status_code == 200
    assert again.json() == {"id": str(row.id), "status": "delivered", "run": False, "ordered": False}
    assert ScheduledMessage.objects.get(id=row.id).delivery_count == 2  # the duplicate is counted, not run


def test_a_redelivery_after_a_worker_died_runs_again(team_key, task):
    row = task(status=Status.DELIVERED)
    response = claim(team_key("default", "tasks"), row.id, redelivered=True)
    assert response.status_code == 200
    assert response.json() == {"id": str(row.id), "status": "delivered", "run": True, "ordered": False}


@pytest.mark.parametrize("status", [Status.PENDING, Status.PUBLISHED])
@pytest.mark.parametrize("redelivered", [False, True])
def test_a_claim_before_the_task_is_due_is_refused_and_changes_nothing(team_key, task, status, redelivered, settings):
    """A claim is no cancel: a key with the tasks scope alone cannot take tomorrow's run today."""
    settings.DELAY_CLAIM_MARGIN_MS = 3000
    row = task(status=status)
    ScheduledMessage.objects.filter(id=row.id).update(due_at=timezone.now() + timedelta(days=1))
    response = claim(team_key("default", "tasks"), row.id, redelivered=redelivered)
    assert response.status_code == 409, response.content
    assert "DELAY_CLAIM_MARGIN_MS" in response.json()["detail"]
    stored = ScheduledMessage.objects.get(id=row.id)
    assert (stored.status, stored.delivery_count, stored.delivered_at) == (status, 0, None)


def test_a_claim_within_the_margin_of_the_due_time_runs(team_key, task, settings):
    settings.DELAY_CLAIM_MARGIN_MS = 3000
    row = task()
    ScheduledMessage.objects.filter(id=row.id).update(due_at=timezone.now() + timedelta(seconds=1))
    response = claim(team_key("default", "tasks"), row.id)
    assert response.status_code == 200 and response.json()["run"] is True


def test_reruns_of_a_claimed_task_are_bounded_then_it_fails(team_key, task, settings):
    settings.DELAY_TASK_MAX_RERUNS = 2
    row = task()
    worker = team_key("default", "tasks")
    runs = [claim(worker, row.id, redelivered=True).json()["run"] for _ in range(5)]
    assert runs == [True, True, True, False, False]  # the first run and 2 reruns
    stored = ScheduledMessage.objects.get(id=row.id)
    assert stored.status == Status.FAILED and "rerun" in stored.last_error and stored.finished_at is not None


@pytest.mark.parametrize("redelivered", [False, True])
def test_a_cancelled_task_does_not_run(team_key, task, redelivered):
    row = task(status=Status.CANCELLED)
    response = claim(team_key("default", "tasks"), row.id, redelivered=redelivered)
    assert response.status_code == 200
    assert response.json() == {"id": str(row.id), "status": "cancelled", "run": False, "ordered": False}
    assert status_of(row) == Status.CANCELLED


def test_another_team_s_message_is_a_404_exactly_like_an_unknown_id(team_key, task, endpoint_in):
    theirs = task(endpoint=endpoint_in("other"))
    worker = team_key("default", "tasks")
    unknown_id = uuid.uuid4()
    response, unknown = claim(worker, theirs.id), claim(worker, unknown_id)
    assert response.status_code == unknown.status_code == 404
    assert response.json() == {"detail": message_describe_gone(message_id=str(theirs.id))}
    assert unknown.json() == {"detail": message_describe_gone(message_id=str(unknown_id))}
    assert status_of(theirs) == Status.PUBLISHED
    assert claim(worker, "not-a-uuid").status_code == 404


def test_claiming_needs_the_tasks_scope(team_key, task):
    row = task()
    for scopes in (("read", "write", "cancel"), ("read",)):
        response = claim(team_key("default", *scopes), row.id)
        assert response.status_code == 403, response.content
    assert status_of(row) == Status.PUBLISHED


def test_a_member_without_the_tasks_right_in_the_message_s_team_is_refused(api_as, task, endpoint_in):
    row = task()
    viewer = api_as("viewer")
    assert claim(viewer, row.id).status_code == 403
    member_elsewhere = api_as("member", team="other")
    assert claim(member_elsewhere, row.id).status_code == 404  # a team it does not see
    assert claim(api_as("member"), row.id).json()["run"] is True


@pytest.mark.parametrize("handler", [Endpoint.Handler.NONE, Endpoint.Handler.WEBHOOK, Endpoint.Handler.CELERY_TASK])
def test_a_message_that_is_not_a_celery_task_is_a_409(team_key, task, endpoint_in, handler):
    row = task(endpoint=endpoint_in(handler=handler))
    response = claim(team_key("default", "tasks"), row.id)
    assert response.status_code == 409 and "not a Celery task" in response.json()["detail"]
    assert status_of(row) == Status.PUBLISHED


@pytest.mark.parametrize(("body", "field"), [
    ({"redelivered": "perhaps"}, "redelivered"),
    ({"redelivered": None}, "redelivered"),
    ({"worker": "w" * 201}, "worker"),
    ({"worker": "celery@\x00host"}, "worker"),
    ({"worker": ["a"]}, "worker"),
])
def test_a_bad_claim_is_a_400_naming_the_field(team_key, task, body, field):
    row = task()
    response = claim(team_key("default", "tasks"), row.id, **body)
    assert response.status_code == 400 and field in response.json(), response.content
    assert status_of(row) == Status.PUBLISHED


def test_the_platform_s_own_hook_sets_a_task_without_a_row_aside_instead_of_running_it():
    """Unlike the API's claim (NotFound), the platform's hook answers "do not run" and keeps the copy for
    the operator, a malformed id too (a restore from backup: delivery/orphans.py)."""
    from scheduling.celery.services import celery_task_claim
    from scheduling.models import OrphanCopy

    missing = str(uuid.uuid4())
    assert celery_task_claim(message_id=missing, redelivered=False) is False
    assert celery_task_claim(message_id="not-a-uuid", redelivered=False) is False
    kept = OrphanCopy.objects.filter(message_id__in=[missing, "not-a-uuid"])
    assert sorted(kept.values_list("message_id", flat=True)) == sorted([missing, "not-a-uuid"])


# --- cancel-task -------------------------------------------------------------------------------------


def cancel_task(client, **body):
    return client.post("/api/messages/cancel-task/", body, format="json")


def test_cancel_task_cancels_the_first_run_and_the_retries_of_the_caller_s_team_only(team_key, task, endpoint_in):
    task_id = f"remind-{uuid.uuid4().hex[:8]}"
    mine, theirs = endpoint_in(), endpoint_in("other")
    first, retry = task(mine, key=task_id), task(mine, key=f"{task_id}#retry3")
    done = task(mine, key=f"{task_id}#retry1", status=Status.DELIVERED)
    similar = task(mine, key=f"{task_id}x")  # another task id that starts the same
    other_team = task(theirs, key=task_id)
    response = cancel_task(team_key("default", "cancel"), task_id=task_id)
    assert response.status_code == 200 and response.json() == {"count": 2}
    assert [status_of(r) for r in (first, retry, done, similar, other_team)] == [
        Status.CANCELLED, Status.CANCELLED, Status.DELIVERED, Status.PUBLISHED, Status.PUBLISHED]
    assert cancel_task(team_key("default", "cancel"), task_id=task_id).json() == {"count": 0}


def test_cancel_task_narrowed_to_an_endpoint(team_key, task, endpoint_in):
    task_id = str(uuid.uuid4())
    one, two = endpoint_in(), endpoint_in()
    here, there = task(one, key=task_id), task(two, key=f"{task_id}#retry1")
    key = team_key("default", "cancel")
    response = cancel_task(key, task_id=task_id, endpoint=one.name)
    assert response.status_code == 200 and response.json() == {"count": 1}
    assert (status_of(here), status_of(there)) == (Status.CANCELLED, Status.PUBLISHED)
    assert cancel_task(key, task_id=task_id, endpoint=two.name, team="default").json() == {"count": 1}
    assert status_of(there) == Status.CANCELLED


def test_an_operator_cancels_in_every_team_or_in_the_one_named(api, task, endpoint_in):
    task_id = str(uuid.uuid4())
    mine, theirs = task(endpoint_in(), key=task_id), task(endpoint_in("other"), key=task_id)
    assert cancel_task(api, task_id=task_id, team="other").json() == {"count": 1}
    assert (status_of(mine), status_of(theirs)) == (Status.PUBLISHED, Status.CANCELLED)
    assert cancel_task(api, task_id=task_id).json() == {"count": 1}
    assert status_of(mine) == Status.CANCELLED


def test_cancel_task_leaves_other_handlers_messages_alone(team_key, task, endpoint_in):
    task_id = str(uuid.uuid4())
    plain = task(endpoint_in(handler=Endpoint.Handler.NONE), key=task_id)
    assert cancel_task(team_key("default", "cancel"), task_id=task_id).json() == {"count": 0}
    assert status_of(plain) == Status.PUBLISHED


def test_cancel_task_needs_the_cancel_scope(team_key, task):
    task_id = str(uuid.uuid4())
    row = task(key=task_id)
    response = cancel_task(team_key("default", "read", "write", "tasks"), task_id=task_id)
    assert response.status_code == 403
    assert status_of(row) == Status.PUBLISHED


@pytest.mark.parametrize(("body", "field"), [
    ({}, "task_id"),
    ({"task_id": ""}, "task_id"),
    ({"task_id": "a b"}, "task_id"),
    ({"task_id": "abc#retry1"}, "task_id"),
    ({"task_id": " abc"}, "task_id"),
    ({"task_id": "x" * 156}, "task_id"),
    ({"task_id": "abc\x00"}, "task_id"),
    ({"task_id": ["abc"]}, "task_id"),
    ({"task_id": "abc", "endpoint": "no-such-endpoint"}, "endpoint"),
    ({"task_id": "abc", "team": "no-such-team"}, "team"),
    ({"task_id": "abc", "endpoint": "a\x00b"}, "endpoint"),
])
def test_a_bad_cancel_task_is_a_400_naming_the_field(team_key, task, body, field):
    row = task(key="abc")
    response = cancel_task(team_key("default", "cancel"), **body)
    assert response.status_code == 400 and field in response.json(), response.content
    assert status_of(row) == Status.PUBLISHED


def test_cancel_task_names_a_non_celery_endpoint_and_another_team_s_as_bad_input(team_key, endpoint_in, task):
    plain, theirs = endpoint_in(handler=Endpoint.Handler.WEBHOOK), endpoint_in("other")
    key = team_key("default", "cancel")
    response = cancel_task(key, task_id="abc", endpoint=plain.name)
    assert response.status_code == 400 and "not a celery_queue endpoint" in response.json()["endpoint"][0]
    response = cancel_task(key, task_id="abc", endpoint=theirs.name)
    assert response.status_code == 400 and "no endpoint" in response.json()["endpoint"][0]


def test_the_in_project_cancel_task_still_cancels_in_every_team(task, endpoint_in):
    task_id = str(uuid.uuid4())
    rows = [task(endpoint_in(), key=task_id), task(endpoint_in("other"), key=f"{task_id}#retry2")]
    assert celery_task_cancel(task_id=task_id) == 2
    assert [status_of(r) for r in rows] == [Status.CANCELLED, Status.CANCELLED]


# --- the schema --------------------------------------------------------------------------------------


def test_the_schema_describes_the_routes(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    claim_op = schema["paths"]["/api/messages/{id}/claim/"]["post"]
    cancel_op = schema["paths"]["/api/messages/cancel-task/"]["post"]
    ended_op = schema["paths"]["/api/messages/{id}/ended/"]["post"]
    assert (claim_op["operationId"], cancel_op["operationId"]) == ("messages_claim", "messages_cancel_task")
    assert ended_op["operationId"] == "messages_ended"
    components = schema["components"]["schemas"]
    assert set(components["TaskClaimRequest"]["properties"]) == {"redelivered", "worker"}
    assert set(components["TaskClaimed"]["properties"]) == {"id", "status", "run", "ordered"}
    assert set(components["TaskEndedRequest"]["properties"]) == {"retrying"}
    assert set(components["TaskEndAnswer"]["properties"]) == {"id", "turn"}
    assert set(components["TaskCancelRequest"]["properties"]) == {"task_id", "endpoint", "team"}
    assert claim_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/TaskClaimed")
    assert cancel_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Count")


# --- structured tasks: retries -----------------------------------------------------------------------


def test_a_structured_task_s_retries_is_its_retries_header():
    payload = {"task": "billing.tasks.remind", "id": "remind-42", "retries": 3}
    assert structured.task_problem(payload, queue="q", name="n") is None
    assert structured.task_headers(payload, "remind-42")["retries"] == 3
    assert structured.task_headers({"task": "billing.tasks.remind"}, "x")["retries"] == 0
    assert structured.task_problem({"task": "billing.tasks.remind", "retries": 0}, queue="q", name="n") is None
    assert structured.task_problem({"task": "t", "retries": 100_000}, queue="q", name="n") is None


@pytest.mark.parametrize("retries", [-1, 100_001, True, False, 1.0, "2", [1]])
def test_a_bad_retries_is_refused(retries):
    why = structured.task_problem({"task": "billing.tasks.remind", "retries": retries}, queue="q", name="n")
    assert why is not None and why.startswith("retries must be")


def test_a_retry_sent_through_the_api_carries_its_retries_to_the_worker(team_key, endpoint_in):
    from scheduling.messages import wire

    endpoint = endpoint_in()
    # granted here: the migration's grant to `default` is gone after another test's flush
    Team.objects.filter(pk=endpoint.team_id).update(celery_task_allowlist="testapp.*")
    key = team_key("default", "write", "tasks")
    payload = {"task": "testapp.plain_receipt", "args": [1], "id": "remind-42", "retries": 2}
    response = key.post("/api/messages/", {"endpoint": endpoint.name, "payload": payload, "delay_seconds": 5,
                                           "idempotency_key": "remind-42#retry2"}, format="json")
    assert response.status_code == 201, response.content
    row = ScheduledMessage.objects.select_related("endpoint", "topology").get(id=response.json()["id"])
    out, _ = wire.outgoing(row, row.topology.cascade, row.created_at, margin_ms=0)
    assert out.headers["retries"] == 2 and out.headers["id"] == "remind-42"
    refused = key.post("/api/messages/", {"endpoint": endpoint.name, "delay_seconds": 5,
                                          "payload": {**payload, "retries": True}}, format="json")
    assert refused.status_code == 400 and refused.json()["payload"][0].startswith("retries must be")


# --- ended (ordering keys) ------------------------------------------------------------------------


def ended(client, row_id, **body):
    return client.post(f"/api/messages/{row_id}/ended/", body, format="json")


def keyed_pair(task):
    """Two tasks of one ordering key on one endpoint, the first due first."""
    first = task()
    second = task(endpoint=first.endpoint)
    ScheduledMessage.objects.filter(id__in=[first.id, second.id]).update(ordering_key="acct-7")
    ScheduledMessage.objects.filter(id=second.id).update(due_at=first.due_at + timedelta(milliseconds=1))
    return first, second


def test_a_keyed_claim_answers_ordered_or_waiting_and_ended_wakes_the_next(team_key, task):
    first, second = keyed_pair(task)
    worker = team_key("default", "tasks")
    assert claim(worker, first.id).json() == {"id": str(first.id), "status": "delivered", "run": True, "ordered": True}
    assert claim(worker, second.id).json() == {"id": str(second.id), "status": "waiting", "run": False,
                                               "ordered": False}
    kept = ended(worker, first.id, retrying=True)
    assert kept.status_code == 200 and kept.json() == {"id": str(first.id), "turn": "kept"}
    assert status_of(second) == Status.WAITING
    done = ended(worker, first.id)
    assert done.status_code == 200 and done.json() == {"id": str(first.id), "turn": "ended"}
    assert status_of(second) == Status.PENDING  # woken: the relay publishes it again
    assert ended(worker, first.id).json() == {"id": str(first.id), "turn": "none"}  # a second report: nothing
    assert status_of(second) == Status.PENDING


def test_ended_for_a_message_that_holds_no_turn_changes_nothing(team_key, task):
    worker = team_key("default", "tasks")
    plain = task()
    assert claim(worker, plain.id).json()["run"] is True
    assert ended(worker, plain.id).json() == {"id": str(plain.id), "turn": "none"}
    first, second = keyed_pair(task)
    assert claim(worker, first.id).json()["ordered"] is True
    assert claim(worker, second.id).json()["status"] == "waiting"
    for report in (ended(worker, second.id), ended(worker, second.id, retrying=True)):  # not the holder
        assert report.json() == {"id": str(second.id), "turn": "none"}
    assert status_of(second) == Status.WAITING
    assert ended(worker, first.id).json()["turn"] == "ended"


def test_ended_is_team_scoped_needs_the_tasks_scope_and_checks_its_body(team_key, task, endpoint_in, settings):
    first, second = keyed_pair(task)
    worker = team_key("default", "tasks")
    assert claim(worker, first.id).json()["ordered"] is True and claim(worker, second.id).json()["run"] is False
    theirs = team_key("other", "all")
    refused, unknown = ended(theirs, first.id), ended(theirs, uuid.uuid4())
    assert refused.status_code == unknown.status_code == 404
    for scopes in (("read", "write", "cancel"), ("read",)):
        assert ended(team_key("default", *scopes), first.id).status_code == 403
    bad = ended(worker, first.id, retrying="perhaps")
    assert bad.status_code == 400 and "retrying" in bad.json(), bad.content
    settings.DELAY_MAX_BODY_BYTES = 65536
    huge = worker.post(f"/api/messages/{first.id}/ended/", {"retrying": False, "x": "y" * 70_000}, format="json")
    assert huge.status_code == 413, huge.content
    assert status_of(second) == Status.WAITING  # none of these let the key go
    hook = task(endpoint=endpoint_in(handler=Endpoint.Handler.NONE))
    assert ended(worker, hook.id).status_code == 409  # not a Celery task
    assert ended(worker, first.id).json()["turn"] == "ended"
