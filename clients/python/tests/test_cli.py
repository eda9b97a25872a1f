"""delayctl without a platform: ``main([...])`` sends through an httpx.MockTransport (injected by
wrapping ``cli.make_client``), and each test checks the exact requests, the output and the exit
status. The run against a real platform is in another file."""

from __future__ import annotations

import functools
import io
import json
import socket
import subprocess
import sys
import uuid

import httpx
import pytest

from delayclient import Retry, __version__, cli
from delayclient.client import KEY_ENV, URL_ENV

URL, KEY = "https://delays.test", "dk_live_do-not-print-me"
MESSAGE_ID = "0cdf3491-d87a-494f-b066-4f72ae9032d2"


def message(id=MESSAGE_ID, status="published", endpoint="billing", due_at="2026-11-21T12:00:00.250Z", **more):
    return {"id": id, "team": "billing", "endpoint": endpoint, "status": status, "due_at": due_at,
            "payload": {"invoice": 42}, **more}


class FakePlatform:
    """Answers (method, path) from the routes a test sets, and keeps every request it was sent."""

    def __init__(self):
        self.requests: list[httpx.Request] = []
        self.routes = {}

    def on(self, method: str, path: str, answer=None, status: int = 200, headers=None):
        """``answer``: a JSON body, or a function of the request returning a Response (or raising)."""
        self.routes[method, path] = answer if callable(answer) else \
            (lambda request: httpx.Response(status, json=answer, headers=headers))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.routes.get((request.method, request.url.path))
        return route(request) if route else httpx.Response(404, json={"detail": "Not found."})

    @property
    def request(self) -> httpx.Request:
        assert len(self.requests) == 1, [f"{r.method} {r.url}" for r in self.requests]
        return self.requests[0]

    @property
    def body(self):
        return json.loads(self.request.content)


@pytest.fixture
def api(monkeypatch):
    platform = FakePlatform()
    monkeypatch.setenv(URL_ENV, URL)
    monkeypatch.setenv(KEY_ENV, KEY)
    real = cli.make_client

    def make_client(args):
        """The real one (its URL and key checks included), sending through the fake; retries instant."""
        return real(args, http=httpx.Client(transport=httpx.MockTransport(platform)), retry=Retry(backoff=0))

    monkeypatch.setattr(cli, "make_client", make_client)
    return platform


@pytest.fixture
def run(capsys, monkeypatch):
    def run(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        status = cli.main(list(argv))
        out, err = capsys.readouterr()
        assert KEY not in out + err, "the key must never be printed"
        assert "Traceback" not in err
        return status, out, err

    return run


def sent_by_cli(request: httpx.Request) -> None:
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.url.host == "delays.test"


# -- schedule ------------------------------------------------------------------------------------

def test_schedule_with_a_delay_prints_the_id_alone(api, run):
    api.on("POST", "/api/messages/", message(), status=201)
    status, out, err = run("schedule", "billing", "--delay", "3600", "--payload", '{"invoice": 42}',
                           "--idempotency-key", "invoice-42")
    assert (status, out, err) == (0, f"{MESSAGE_ID}\n", "")
    sent_by_cli(api.request)
    assert api.request.method == "POST" and api.request.url.path == "/api/messages/"
    assert api.body == {"endpoint": "billing", "payload": {"invoice": 42}, "delay_seconds": 3600,
                        "idempotency_key": "invoice-42"}


def test_schedule_sends_a_fractional_delay_exactly_and_makes_a_key(api, run):
    api.on("POST", "/api/messages/", message(), status=201)
    assert run("schedule", "billing", "--delay", "10.25")[0] == 0
    body = api.body
    assert body["delay_seconds"] == 10.25 and b'"delay_seconds":10.25' in api.request.content
    assert body["payload"] == {}  # no payload given: {}
    uuid.UUID(body.pop("idempotency_key"))  # the library's, kept across its retries
    assert set(body) == {"endpoint", "payload", "delay_seconds"}


@pytest.mark.parametrize("at, sent", [
    ("2026-11-21T12:00:00.250Z", "2026-11-21T12:00:00.250000+00:00"),
    ("2026-11-21T12:00:00z", "2026-11-21T12:00:00+00:00"),
    ("2026-11-21T13:00:00+01:00", "2026-11-21T13:00:00+01:00"),
    ("2026-11-21T12:00:00.5-05:00", "2026-11-21T12:00:00.500000-05:00"),
])
def test_schedule_at_a_time_with_its_timezone(api, run, at, sent):
    api.on("POST", "/api/messages/", message(), status=201)
    assert run("schedule", "orders.eu", "--at", at, "--team", "billing")[:2] == (0, f"{MESSAGE_ID}\n")
    body = api.body
    assert body["deliver_at"] == sent and "delay_seconds" not in body
    assert body["endpoint"] == "orders.eu" and body["team"] == "billing"


@pytest.mark.parametrize("option, value, field, sent", [
    ("--expire-after", "3600", "expire_after_seconds", 3600),
    ("--expires-at", "2026-11-21T13:00:00Z", "expires_at", "2026-11-21T13:00:00+00:00"),
])
def test_schedule_with_an_expiry_sends_it(api, run, option, value, field, sent):
    api.on("POST", "/api/messages/", message(), status=201)
    assert run("schedule", "billing", "--delay", "60", option, value)[0] == 0
    assert api.body[field] == sent and not {"expires_at", "expire_after_seconds"} - {field} & set(api.body)


def test_schedule_with_both_expiries_is_refused_and_nothing_sent(api, run):
    status, out, err = run("schedule", "billing", "--delay", "60", "--expire-after", "1",
                           "--expires-at", "2026-11-21T13:00:00Z")
    assert status == 2 and "not allowed with argument" in err and not api.requests


@pytest.mark.parametrize("at", ["2026-11-21T12:00:00", "2026-11-21T12:00", "2026-11-21"])
def test_a_time_without_timezone_is_refused_and_nothing_sent(api, run, at):
    status, out, err = run("schedule", "billing", "--at", at)
    assert status == 2 and out == ""
    assert "has no timezone: add Z for UTC or an offset" in err
    assert api.requests == []


def test_a_time_that_is_not_iso_is_refused(api, run):
    status, _, err = run("reschedule", MESSAGE_ID, "--at", "tomorrow")
    assert status == 2 and "not an ISO 8601 time: 'tomorrow'" in err and api.requests == []


@pytest.mark.parametrize("how", [["-"], ["--payload", "-"], ["--payload-file", "-"]])
def test_schedule_reads_the_payload_from_stdin(api, run, how):
    api.on("POST", "/api/messages/", message(), status=201)
    status, out, _ = run("schedule", "billing", "--delay", "5", *how, stdin='{"name": "Zoë", "n": [1, 2]}\n'.encode())
    assert (status, out) == (0, f"{MESSAGE_ID}\n")
    assert api.body["payload"] == {"name": "Zoë", "n": [1, 2]}


def test_schedule_reads_the_payload_from_a_file(api, run, tmp_path):
    api.on("POST", "/api/messages/", message(), status=201)
    (tmp_path / "p.json").write_text('[1, "two", null]')
    assert run("schedule", "billing", "--delay", "5", "--payload-file", str(tmp_path / "p.json"))[0] == 0
    assert api.body["payload"] == [1, "two", None]


@pytest.mark.parametrize("argv, stdin, says", [
    (["--payload", "{invoice: 42}"], None, "the payload (--payload) is not JSON: Expecting property name"),
    (["--payload", '{"a": NaN}'], None, "the payload (--payload) is not JSON: NaN (JSON has no NaN or Infinity)"),
    (["--payload", ""], None, "the payload (--payload) is empty"),
    (["-"], b"", "the payload (stdin) is empty"),
    (["-"], b'{"a": 1', "the payload (stdin) is not JSON"),
    (["-"], b"\xff\xfe{", "the payload (stdin) is not JSON"),
    (["--payload-file", "/nonexistent/p.json"], None, "cannot read --payload-file /nonexistent/p.json"),
])
def test_a_bad_payload_is_refused_and_nothing_sent(api, run, argv, stdin, says):
    status, out, err = run("schedule", "billing", "--delay", "5", *argv, stdin=stdin)
    assert status == 2 and out == ""
    assert err.startswith(f"delayctl: {says}") and err.count("\n") == 1, err
    assert api.requests == []


@pytest.mark.parametrize("argv", [["--delay", "5", "--payload", "{}", "-"], ["-", "--delay", "5", "--payload", "{}"],
                                  ["--payload-file", "-", "--delay", "5", "-"], ["--payload", "{}", "--payload-file", "x"]])
def test_two_payload_sources_are_a_usage_error(api, run, argv):
    status, _, err = run("schedule", "billing", *argv, stdin=b"{}")
    assert status == 2 and "not allowed with" in err and api.requests == []


def test_a_stray_dash_elsewhere_is_a_usage_error(api, run):
    status, _, err = run("get", MESSAGE_ID, "-")
    assert status == 2 and "unrecognized arguments: -" in err and api.requests == []


def test_a_delay_or_a_time_is_required_not_both(api, run):
    assert run("schedule", "billing")[0] == 2
    assert run("schedule", "billing", "--delay", "5", "--at", "2026-11-21T12:00:00Z")[0] == 2
    assert run("schedule", "billing", "--delay", "nan")[0] == 2
    assert run("schedule", "billing", "--delay", "soon")[0] == 2
    assert api.requests == []


def test_an_existing_idempotency_key_is_said_on_stderr_only(api, run):
    api.on("POST", "/api/messages/", message(), status=200)
    status, out, err = run("schedule", "billing", "--delay", "5", "--idempotency-key", "invoice-42")
    assert (status, out) == (0, f"{MESSAGE_ID}\n")
    assert "idempotency key already used" in err


def test_schedule_json_prints_the_message(api, run):
    api.on("POST", "/api/messages/", message(created_at="2026-11-21T11:00:00Z"), status=201)
    status, out, _ = run("--json", "schedule", "billing", "--delay", "60")
    assert status == 0
    assert json.loads(out) == message(created_at="2026-11-21T11:00:00Z")


# -- errors --------------------------------------------------------------------------------------

def test_a_400_is_one_line_on_stderr_and_exit_1(api, run):
    api.on("POST", "/api/messages/", {"delay_seconds": ["Ensure this value is greater than or equal to 0."]},
           status=400, headers={"X-Request-ID": "req-1"})
    status, out, err = run("schedule", "billing", "--delay", "-5")
    assert (status, out) == (1, "")
    assert err == "delayctl: 400 delay_seconds: Ensure this value is greater than or equal to 0. (request req-1)\n"
    assert api.body["delay_seconds"] == -5  # the platform's rule, not re-implemented here


def test_a_400_names_every_field(api, run):
    api.on("POST", "/api/messages/", {"endpoint": ["no such endpoint"], "payload": ["too large"]}, status=400)
    status, _, err = run("schedule", "nowhere", "--delay", "5")
    assert status == 1 and err == "delayctl: 400 endpoint: no such endpoint; payload: too large\n"


@pytest.mark.parametrize("command", [["get", MESSAGE_ID], ["cancel", MESSAGE_ID], ["republish", MESSAGE_ID]])
def test_an_api_error_of_any_command_is_exit_1(api, run, command):
    status, out, err = run(*command)  # no route: the fake answers 404
    assert (status, out, err) == (1, "", "delayctl: 404 Not found.\n")


def test_an_error_reason_cannot_drive_the_terminal(api, run):
    api.on("POST", f"/api/messages/{MESSAGE_ID}/cancel/", {"detail": "already delivered\n\x1b[31mred"}, status=409)
    status, _, err = run("cancel", MESSAGE_ID)
    assert status == 1 and err == "delayctl: 409 already delivered\\n\\x1b[31mred\n"


def test_connection_refused_is_exit_3_after_the_retries(api, run):
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    api.on("POST", "/api/messages/", refuse)
    status, out, err = run("schedule", "billing", "--delay", "5")
    assert (status, out) == (3, "")
    assert err == ("delayctl: cannot reach the platform at https://delays.test: POST /api/messages/: "
                   "ConnectError('[Errno 111] Connection refused')\n")
    keys = {json.loads(r.content)["idempotency_key"] for r in api.requests}
    assert len(api.requests) == 4 and len(keys) == 1  # retried with one key: never scheduled twice


def test_a_5xx_is_retried_then_exit_1(api, run):
    api.on("GET", f"/api/messages/{MESSAGE_ID}/", {"detail": "unavailable"}, status=503)
    assert run("get", MESSAGE_ID) == (1, "", "delayctl: 503 unavailable\n")
    assert len(api.requests) == 4  # a read: retried by the client


@pytest.mark.parametrize("answer", [
    httpx.Response(301, headers={"Location": "https://elsewhere/"}, text="<html>Moved</html>"),
    httpx.Response(200, text="<html>login</html>"),
    httpx.Response(200, json={"unexpected": True}),
])
def test_an_answer_that_is_not_the_apis_is_one_line_and_exit_1(api, run, answer):
    api.on("GET", "/api/schedules/preview/", lambda request: answer)
    status, out, err = run("preview", "--cron", "* * * * *")
    assert (status, out) == (1, "")
    assert err.startswith("delayctl: unexpected answer from https://delays.test (is it the platform's URL?)")
    assert err.count("\n") == 1


def test_a_closed_port_is_exit_3(monkeypatch, run):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(cli, "make_client", functools.partial(cli.make_client, retry=Retry(attempts=1)))
    status, out, err = run("--url", f"http://127.0.0.1:{port}", "--key", KEY, "--timeout", "2", "get", MESSAGE_ID)
    assert (status, out) == (3, "")
    assert err.startswith(f"delayctl: cannot reach the platform at http://127.0.0.1:{port}: GET /api/messages/")


@pytest.mark.parametrize("unset, says", [(KEY_ENV, "no API key: set DELAY_PLATFORM_KEY"),
                                         (URL_ENV, "no platform URL: set DELAY_PLATFORM_URL or give --url")])
def test_no_key_or_url_is_exit_2(api, run, monkeypatch, unset, says):
    monkeypatch.delenv(unset)
    status, out, err = run("get", MESSAGE_ID)
    assert (status, out) == (2, "") and err.startswith(f"delayctl: {says}")
    assert api.requests == []


def test_a_url_that_is_not_http_is_exit_2(api, run):
    status, _, err = run("--url", "delays.test", "get", MESSAGE_ID)
    assert status == 2 and "must start with http:// or https://" in err and api.requests == []


def test_the_options_override_the_environment(api, run, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "another-key")
    api.on("GET", f"/api/messages/{MESSAGE_ID}/", message())
    assert run("get", MESSAGE_ID, "--key", KEY)[0] == 0
    assert api.request.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["list", "--limit", "-1"], ["--timeout", "0", "list"],
                                  ["get"], ["preview"], ["preview", "--cron", "* * * * *", "--interval", "5"]])
def test_usage_errors_are_exit_2(api, run, argv):
    status, out, err = run(*argv)
    assert (status, out) == (2, "") and "usage: delayctl" in err
    assert api.requests == []


def test_version(run):
    assert run("--version") == (0, f"delayctl {__version__}\n", "")


def test_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "delayclient.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, f"delayctl {__version__}\n")


# -- the other commands ------------------------------------------------------------------------

def test_get_prints_the_fields(api, run):
    api.on("GET", f"/api/messages/{MESSAGE_ID}/", message(last_error="HTTP 500: boom\n", delivery_count=1))
    status, out, _ = run("get", MESSAGE_ID)
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"id              {MESSAGE_ID}"  # aligned on the longest name, delivery_count
    assert "status          published" in lines and 'payload         {"invoice": 42}' in lines
    assert 'last_error      "HTTP 500: boom\\n"' in lines and "delivery_count  1" in lines
    assert api.request.method == "GET"


def test_get_json_after_the_command(api, run):
    api.on("GET", f"/api/messages/{MESSAGE_ID}/", message())
    status, out, _ = run("get", MESSAGE_ID, "--json")
    assert status == 0 and json.loads(out) == message()


def test_cancel_and_republish(api, run):
    api.on("POST", f"/api/messages/{MESSAGE_ID}/cancel/", {"id": MESSAGE_ID, "status": "cancelled"})
    assert run("cancel", MESSAGE_ID)[:2] == (0, f"{MESSAGE_ID} cancelled\n")
    api.on("POST", f"/api/messages/{MESSAGE_ID}/republish/", {"id": MESSAGE_ID, "status": "published"})
    status, out, _ = run("--json", "republish", MESSAGE_ID)
    assert status == 0 and json.loads(out) == {"id": MESSAGE_ID, "status": "published"}
    assert [(r.method, r.url.path, r.content) for r in api.requests] == [
        ("POST", f"/api/messages/{MESSAGE_ID}/cancel/", b""), ("POST", f"/api/messages/{MESSAGE_ID}/republish/", b"")]


@pytest.mark.parametrize("when, body", [(["--delay", "300"], {"delay_seconds": 300}),
                                        (["--at", "2026-11-30T09:00:00Z"], {"deliver_at": "2026-11-30T09:00:00+00:00"})])
def test_reschedule(api, run, when, body):
    api.on("PATCH", f"/api/messages/{MESSAGE_ID}/", message(status="pending", due_at="2026-11-30T09:00:00Z"))
    assert run("reschedule", MESSAGE_ID, *when)[:2] == (0, f"{MESSAGE_ID} pending 2026-11-30T09:00:00Z\n")
    assert api.request.method == "PATCH" and api.body == body


def test_cancel_task_prints_the_count(api, run):
    api.on("POST", "/api/messages/cancel-task/", {"count": 3})
    assert run("--team", "billing", "cancel-task", "task-7", "--endpoint", "celery")[:2] == (0, "3\n")
    assert api.body == {"task_id": "task-7", "endpoint": "celery", "team": "billing"}


# -- list ----------------------------------------------------------------------------------------

def pages(api, total: int, per_page: int):
    """``total`` messages, ``per_page`` a page, chained by ``next`` cursors as the API does."""
    def answer(request):
        start = int(request.url.params.get("cursor", 0))
        ids = range(start, min(start + per_page, total))
        more = start + per_page < total
        return httpx.Response(200, json={
            "next": f"{URL}/api/messages/?cursor={start + per_page}" if more else None, "previous": None,
            "results": [message(id=f"m{i}", status="pending", endpoint="billing-reminders") for i in ids]})

    api.on("GET", "/api/messages/", answer)


@pytest.mark.parametrize("limit, requests", [("3", 2), ("2", 1), ("4", 2), ("5", 3), ("0", 3)])
def test_list_stops_paging_at_the_limit(api, run, limit, requests):
    pages(api, total=5, per_page=2)
    status, out, _ = run("list", "--limit", limit)
    shown = 5 if limit == "0" else min(int(limit), 5)
    lines = out.splitlines()
    assert status == 0 and len(lines) == 1 + shown
    assert len(api.requests) == requests


def test_list_sends_the_filters_and_prints_a_table(api, run):
    pages(api, total=2, per_page=50)
    status, out, _ = run("--team", "billing", "list", "--endpoint", "billing-reminders", "--status", "pending",
                         "--schedule", "reports.nightly")
    assert status == 0
    assert dict(api.request.url.params) == {"endpoint": "billing-reminders", "status": "pending",
                                            "schedule": "reports.nightly", "team": "billing"}
    assert out.splitlines() == [
        "ID  STATUS   ENDPOINT           DUE_AT",
        "m0  pending  billing-reminders  2026-11-21T12:00:00.250Z",
        "m1  pending  billing-reminders  2026-11-21T12:00:00.250Z",
    ]


def test_list_default_limit_is_50(api, run):
    pages(api, total=120, per_page=50)
    assert len(run("list")[1].splitlines()) == 51
    assert len(api.requests) == 1


def test_list_json_is_one_document(api, run):
    pages(api, total=3, per_page=2)
    status, out, _ = run("list", "--limit", "3", "--json")
    assert status == 0
    assert [m["id"] for m in json.loads(out)] == ["m0", "m1", "m2"]


def test_list_of_nothing(api, run):
    api.on("GET", "/api/messages/", {"next": None, "previous": None, "results": []})
    assert run("list")[:2] == (0, "ID  STATUS  ENDPOINT  DUE_AT\n")
    assert run("list", "--json")[:2] == (0, "[]\n")


# -- preview -------------------------------------------------------------------------------------

def test_preview_prints_one_run_a_line(api, run):
    api.on("GET", "/api/schedules/preview/",
           {"runs": ["2026-03-30T00:30:00Z", "2026-03-31T00:30:00.250Z", "2026-04-01T00:30:00+00:00"]})
    status, out, _ = run("preview", "--cron", "30 2 * * 1-5", "--timezone", "Europe/Paris", "--count", "3",
                         "--after", "2026-03-27T12:00:00Z")
    assert (status, out) == (0, "2026-03-30T00:30:00Z\n2026-03-31T00:30:00.250Z\n2026-04-01T00:30:00Z\n")
    assert dict(api.request.url.params) == {"cron": "30 2 * * 1-5", "timezone": "Europe/Paris", "count": "3",
                                            "after": "2026-03-27T12:00:00+00:00"}


def test_preview_an_interval_as_json(api, run):
    api.on("GET", "/api/schedules/preview/", {"runs": ["2026-01-01T00:00:00Z", "2026-01-01T00:00:01.500Z"]})
    status, out, _ = run("preview", "--interval", "1.5", "--start-at", "2026-01-01T00:00:00Z", "--count", "2",
                         "--json")
    assert status == 0 and json.loads(out) == {"runs": ["2026-01-01T00:00:00Z", "2026-01-01T00:00:01.500Z"]}
    assert dict(api.request.url.params) == {"interval_seconds": "1.5", "start_at": "2026-01-01T00:00:00+00:00",
                                            "count": "2"}


def test_preview_refuses_a_timezone_for_an_interval(api, run):
    status, _, err = run("preview", "--interval", "60", "--timezone", "Europe/Paris")
    assert status == 2 and "--timezone reads a --cron rule" in err and api.requests == []


ROUTE = {"id": "0190f2a0-0000-7000-8000-000000000001", "team": "billing", "endpoint": "ops",
         "events": ["message.failed", "quota.warning"], "created_at": "2026-11-21T12:00:00Z"}


def test_schedule_with_callbacks_sends_them(api, run):
    api.on("POST", "/api/messages/", message(on_delivered="outcomes", on_failed="ops"), status=201)
    assert run("schedule", "billing", "--delay", "5", "--on-delivered", "outcomes", "--on-failed", "ops")[0] == 0
    assert api.body["on_delivered"] == "outcomes" and api.body["on_failed"] == "ops"


def test_schedule_with_a_flow_key_sends_it(api, run):
    api.on("POST", "/api/messages/", message(flow_key="customer-42"), status=201)
    assert run("schedule", "billing", "--delay", "5", "--flow-key", "customer-42")[0] == 0
    assert api.body["flow_key"] == "customer-42"
def test_schedule_with_a_debounce_sends_it(api, run):
    api.on("POST", "/api/messages/", message(), status=201)
    assert run("schedule", "billing", "--delay", "0", "--debounce", "doc-7", "--debounce-seconds", "30",
               "--debounce-max-seconds", "300")[0] == 0
    assert api.body["debounce"] == {"key": "doc-7", "seconds": 30, "max_seconds": 300, "mode": "trailing"}
    status, _, err = run("schedule", "billing", "--delay", "0", "--debounce-seconds", "30")
    assert status == 2 and "go with --debounce KEY" in err


def test_notifications_add_list_show_and_remove(api, run):
    api.on("POST", "/api/notifications/", ROUTE, status=201)
    assert run("notifications", "add", "ops", "message.failed", "quota.warning")[:2] == (0, f"{ROUTE['id']}\n")
    assert api.body == {"endpoint": "ops", "events": ["message.failed", "quota.warning"]}
    api.requests.clear()
    api.on("GET", "/api/notifications/", {"next": None, "previous": None, "results": [ROUTE]})
    status, out, _ = run("notifications")
    assert status == 0 and out.splitlines()[1].split() == [ROUTE["id"], "ops", "message.failed,quota.warning"]
    api.on("GET", f"/api/notifications/{ROUTE['id']}/", ROUTE)
    assert "quota.warning" in run("notifications", "show", ROUTE["id"])[1]
    api.on("DELETE", f"/api/notifications/{ROUTE['id']}/", None, status=204)
    assert run("notifications", "remove", ROUTE["id"])[:2] == (0, f"{ROUTE['id']} deleted\n")
    assert run("notifications", "add", "ops")[0] == 2  # a type is needed: nothing sent
