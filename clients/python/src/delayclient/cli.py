"""``delayctl``: the delay platform from a shell, for operators and scripts, on ``delayclient.Client``.

    export DELAY_PLATFORM_URL=https://delays.example.com
    export DELAY_PLATFORM_KEY=...   # better than --key: a key on the command line shows in `ps` and the history

    ID=$(delayctl schedule billing --delay 3600 --payload '{"invoice": 42}' --idempotency-key invoice-42)
    delayctl schedule billing --at 2026-11-21T12:00:00.250Z --payload-file invoice.json
    jq -n '{invoice: 43}' | delayctl schedule billing --delay 90.5 -
    delayctl get "$ID"
    delayctl reschedule "$ID" --delay 300
    delayctl reschedule "$ID" --at 2026-11-30T09:00:00+01:00
    delayctl cancel "$ID"
    delayctl republish "$ID"
    delayctl list --endpoint billing --status failed --limit 20
    delayctl list --schedule reports.nightly --json | jq -r '.[].id'
    delayctl preview --cron '30 2 * * 1-5' --timezone Europe/Paris --count 5
    delayctl preview --interval 90 --start-at 2026-11-26T09:00:00Z --count 3
    delayctl cancel-task 5b0c4a1e-0d8e-4a8f-9a43-2f6b1f0e7c11 --endpoint celery-billing
    delayctl subscribe 'invoice.*' ledger --filter '{"customer.country": ["FR", "DE"]}'
    delayctl subscriptions
    delayctl unsubscribe "$SUBSCRIPTION_ID"
    EVENT=$(delayctl publish invoice.paid --delay 60 --payload '{"invoice": 42}' --idempotency-key inv-42)
    delayctl event "$EVENT"
    delayctl cancel-event "$EVENT"

Global options (before or after the command): ``--url``, ``--key``, ``--team`` (schedule, list,
cancel-task: where your key's teams have several endpoints of that name), ``--json`` (one JSON
document on stdout: the API's answer), ``--timeout SECONDS``, ``--version``.

Times (``--at``, ``--after``, ``--start-at``) are ISO 8601 with a timezone, ``Z`` or an offset: a
time without one is refused, never guessed. ``schedule`` sends ``{}`` when no payload is given.

Exit status: 0 done; 1 the platform answered an error (4xx, 5xx; the line on stderr is its status
and reason), or something else answered (a proxy's page, a redirect); 2 a usage error (a bad option, a payload that is not JSON, a time without a timezone,
no URL or key): nothing was sent; 3 the platform could not be reached (refused, timed out) after
the client's retries. A ``schedule`` that ended in 3 may still have been stored if the answer was
lost: run it again with the same ``--idempotency-key`` and the platform answers that message.

Also runnable as ``python -m delayclient.cli``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import httpx

from . import errors
from ._version import __version__
from .client import KEY_ENV, URL_ENV, Client

PROG = "delayctl"
EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # as a shell reports a command killed by SIGPIPE (`delayctl list | head -1`)
STATUSES = "pending, published, delivered, cancelled, failed, expired, superseded, waiting, skipped"


class UsageError(Exception):
    """Bad input found after parsing (a payload that is not JSON, no key): exit 2, nothing sent."""


# -- argument types: checked before anything is sent -------------------------------------------

def seconds(text: str) -> int | float:
    """A number of seconds as typed: a whole number stays an int in the JSON body (``60``, not
    ``60.0``); NaN and infinities are refused here, as the platform would."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number of seconds: {text!r}")
    return int(value) if value.is_integer() else value


def aware_time(text: str) -> datetime:
    """An ISO 8601 time that names its timezone. A naive one would be read in the platform's zone,
    not the operator's, so it is refused rather than guessed. (``Z`` and short fractions are
    normalised for Python 3.10's ``fromisoformat``.)"""
    normal = re.sub(r"[zZ]$", "+00:00", text.strip())
    normal = re.sub(r"(\.\d{1,5})(?=[+-]|$)", lambda m: m.group(1).ljust(7, "0"), normal)
    try:
        value = datetime.fromisoformat(normal)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r} (e.g. 2026-11-21T12:00:00Z)") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no timezone: add Z for UTC or an offset such as +01:00 (e.g. 2026-11-21T12:00:00Z)")
    return value


def positive(text: str) -> float:
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def at_least_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


# -- the payload ---------------------------------------------------------------------------------

def _refuse_constant(name: str):
    raise ValueError(f"{name} (JSON has no NaN or Infinity)")


def _stdin_bytes() -> bytes | str:
    return getattr(sys.stdin, "buffer", sys.stdin).read()


def _payload_source(args) -> tuple[str, bytes | str] | None:
    """Where the payload comes from, and its text; None: not given."""
    if "-" in (args.payload, args.payload_file, args.stdin):
        return "stdin", _stdin_bytes()
    if args.payload_file is not None:
        try:
            return f"--payload-file {args.payload_file}", Path(args.payload_file).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read --payload-file {args.payload_file}: {exc.strerror or exc}") from None
    if args.payload is not None:
        return "--payload", args.payload
    return None


def read_payload(args):
    """The payload, parsed and checked before anything is sent: a typo must not become a message."""
    given = _payload_source(args)
    if given is None:
        return {}
    source, text = given
    if not text.strip():
        raise UsageError(f"the payload ({source}) is empty: give JSON, e.g. '{{}}'")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a number of too many digits
        raise UsageError(f"the payload ({source}) is not JSON: {exc}") from None


# -- the client ----------------------------------------------------------------------------------

def make_client(args, **options) -> Client:
    """The library's Client from the options and the environment. The seam tests replace to send
    through an ``httpx.MockTransport``: ``options`` go to Client as they are (``http=``, ``retry=``)."""
    url = args.url or os.environ.get(URL_ENV, "")
    key = args.key or os.environ.get(KEY_ENV, "")
    if not url:
        raise UsageError(f"no platform URL: set {URL_ENV} or give --url")
    if not key:
        raise UsageError(f"no API key: set {KEY_ENV} (or give --key, which other users can see in ps)")
    if args.timeout is not None:
        options.setdefault("timeout", args.timeout)
    try:
        return Client(url, key, **options)
    except ValueError:
        raise UsageError(f"the platform URL must start with http:// or https://, not {url!r}") from None


# -- output --------------------------------------------------------------------------------------

def _cell(value) -> str:
    """One value on one line, quoted when it could break a row or drive the terminal (a webhook's
    answer excerpt in ``last_error`` is a third party's text)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value if value.isprintable() else json.dumps(value)
    return json.dumps(value)


def _utc(when: datetime) -> str:
    text = when.astimezone(timezone.utc).isoformat(timespec="milliseconds" if when.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in (header, *rows))


def fields(record: dict) -> str:
    """An object as aligned ``name  value`` lines, in the API's order."""
    width = max((len(name) for name in record), default=0)
    return "\n".join(f"{name.ljust(width)}  {_cell(value)}" for name, value in record.items())


# -- the commands: each returns (the JSON document, the plain text) ----------------------------

def debounce_of(args) -> dict | None:
    """--debounce KEY with its --debounce-seconds (and --debounce-max-seconds, --debounce-mode)."""
    given = (args.debounce_seconds, args.debounce_max_seconds, args.debounce_mode)
    if args.debounce is None:
        if any(v is not None for v in given):
            raise UsageError("--debounce-seconds, --debounce-max-seconds and --debounce-mode go with --debounce KEY")
        return None
    if args.debounce_seconds is None:
        raise UsageError("--debounce KEY needs --debounce-seconds")
    debounce = {"key": args.debounce, "seconds": args.debounce_seconds, "mode": args.debounce_mode or "trailing"}
    return debounce | ({"max_seconds": args.debounce_max_seconds} if args.debounce_max_seconds is not None else {})


def cmd_schedule(client: Client, args):
    payload = read_payload(args)
    message = client.messages.schedule(args.endpoint, payload, delay=args.delay, deliver_at=args.at,
                                       idempotency_key=args.idempotency_key, team=args.team,
                                       on_delivered=args.on_delivered, on_failed=args.on_failed,
                                       expires_at=args.expires_at, expire_after=args.expire_after,
                                       flow_key=args.flow_key, debounce=debounce_of(args))
    if message.created is False:  # on stderr: `ID=$(delayctl schedule ...)` still gets the id alone
        print(f"{PROG}: idempotency key already used: this is the existing message", file=sys.stderr)
    return message.raw, message.id


def cmd_get(client: Client, args):
    message = client.messages.get(args.id)
    return message.raw, fields(message.raw)


def cmd_cancel(client: Client, args):
    result = client.messages.cancel(args.id)
    return result.raw, f"{result.id} {result.status}"


def cmd_republish(client: Client, args):
    result = client.messages.republish(args.id)
    return result.raw, f"{result.id} {result.status}"


def cmd_reschedule(client: Client, args):
    message = client.messages.reschedule(args.id, delay=args.delay, deliver_at=args.at)
    return message.raw, f"{message.id} {message.status} {_cell(message.raw.get('due_at'))}"


def cmd_list(client: Client, args):
    """Newest first; pages are fetched only as far as ``--limit`` reads (0: all of them)."""
    pages = client.messages.list(endpoint=args.endpoint, status=args.status, schedule=args.schedule, team=args.team)
    messages = [m.raw for m in itertools.islice(pages, args.limit or None)]
    rows = [[_cell(m.get(name)) for name in ("id", "status", "endpoint", "due_at")] for m in messages]
    return messages, table(["ID", "STATUS", "ENDPOINT", "DUE_AT"], rows)


def cmd_preview(client: Client, args):
    if args.interval is not None and args.timezone is not None:
        raise UsageError("--timezone reads a --cron rule; an --interval counts real seconds")
    runs = [_utc(run) for run in client.schedules.preview(
        cron=args.cron, timezone=args.timezone, interval=args.interval, start_at=args.start_at, after=args.after,
        count=args.count)]
    return {"runs": runs}, "\n".join(runs)


def _route_row(route: dict) -> list[str]:
    return [_cell(route.get("id")), _cell(route.get("endpoint")), ",".join(route.get("events") or ())]


def cmd_notifications(client: Client, args):
    """The notification routes: list (the default), add ENDPOINT TYPE..., show ID, remove ID."""
    if args.action == "add":
        if not args.args or len(args.args) < 2:
            raise UsageError("notifications add ENDPOINT TYPE [TYPE ...]")
        route = client.notifications.create(args.args[0], args.args[1:], team=args.team)
        return route.raw, route.id
    if args.action in ("show", "remove"):
        if len(args.args) != 1:
            raise UsageError(f"notifications {args.action} ID")
        if args.action == "remove":
            client.notifications.delete(args.args[0])
            return {"id": args.args[0], "deleted": True}, f"{args.args[0]} deleted"
        route = client.notifications.get(args.args[0])
        return route.raw, fields(route.raw)
    if args.args:
        raise UsageError("notifications list takes no arguments")
    routes = [r.raw for r in client.notifications.list(team=args.team)]
    return routes, table(["ID", "ENDPOINT", "TYPES"], [_route_row(r) for r in routes])


def cmd_cancel_task(client: Client, args):
    count = client.messages.cancel_task(args.task_id, endpoint=args.endpoint, team=args.team)
    return {"count": count}, str(count)


def cmd_subscribe(client: Client, args):
    try:
        chosen = json.loads(args.filter, parse_constant=_refuse_constant) if args.filter is not None else None
    except ValueError as exc:
        raise UsageError(f"--filter is not JSON: {exc}") from None
    subscription = client.subscriptions.create(args.topic, args.endpoint, filter=chosen, team=args.team)
    return subscription.raw, subscription.id


def cmd_subscriptions(client: Client, args):
    found = [s.raw for s in itertools.islice(client.subscriptions.list(team=args.team), args.limit or None)]
    rows = [[_cell(s.get(name)) for name in ("id", "topic", "endpoint", "filter")] for s in found]
    return found, table(["ID", "TOPIC", "ENDPOINT", "FILTER"], rows)


def cmd_unsubscribe(client: Client, args):
    client.subscriptions.delete(args.id)
    return {"deleted": args.id}, args.id


def cmd_publish(client: Client, args):
    event = client.events.publish(args.topic, read_payload(args), delay=args.delay, deliver_at=args.at,
                                  idempotency_key=args.idempotency_key, team=args.team)
    if event.created is False:
        print(f"{PROG}: idempotency key already used: this is the existing event", file=sys.stderr)
    return event.raw, event.id


def cmd_event(client: Client, args):
    event = client.events.get(args.id)
    lines = [fields({k: v for k, v in event.raw.items() if k != "messages"})]
    lines += [f"message   {m['id']}  {m['endpoint']}" for m in event.messages or ()]
    return event.raw, "\n".join(lines)


def cmd_cancel_event(client: Client, args):
    count = client.events.cancel(args.id)
    return {"cancelled": count}, str(count)


# -- the parser ----------------------------------------------------------------------------------

def _add_globals(parser: argparse.ArgumentParser, top: bool) -> None:
    """The global options, on the top parser and again on each command's (defaults suppressed
    there, so `delayctl list --json` and `delayctl --json list` mean the same)."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    group = parser.add_argument_group("connection and output")
    group.add_argument("--url", default=default(None), help=f"the platform's base URL (default: ${URL_ENV})")
    group.add_argument("--key", default=default(None),
                       help=f"an API key (default: ${KEY_ENV}; prefer it: a key given here shows in ps)")
    group.add_argument("--team", default=default(None),
                       help="the team, where yours have several endpoints of that name (schedule, list, cancel-task)")
    group.add_argument("--json", action="store_true", default=default(False),
                       help="print the API's answer as one JSON document")
    group.add_argument("--timeout", type=positive, metavar="SECONDS", default=default(None),
                       help="per request (default: 30, 5 to connect)")


def _when(parser: argparse.ArgumentParser, verb: str) -> None:
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay", type=seconds, metavar="SECONDS", help=f"{verb} this many seconds from now (fractions allowed)")
    when.add_argument("--at", type=aware_time, metavar="ISO8601",
                      help=f"{verb} at this time, with its timezone: 2026-11-21T12:00:00Z, ...+01:00")


def _command(sub, name: str, run, help: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help, description=help)
    _add_globals(parser, top=False)
    parser.set_defaults(run=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Schedule and manage delayed messages on the delay platform.",
        epilog="exit status: 0 done, 1 the platform answered an error, 2 usage error (nothing sent), "
               "3 the platform could not be reached")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _add_globals(parser, top=True)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    p = _command(sub, "schedule", cmd_schedule, "schedule one message; prints its id")
    p.add_argument("endpoint", metavar="ENDPOINT")
    _when(p, "deliver")
    payload = p.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="JSON", help="the payload, any JSON but null (default: {}); - reads stdin")
    payload.add_argument("--payload-file", metavar="PATH", help="read the payload from a file (- : stdin)")
    payload.add_argument("stdin", nargs="?", choices=["-"], metavar="-", help="read the payload from stdin")
    p.add_argument("--idempotency-key", metavar="KEY",
                   help="the platform answers the existing message for a key it has seen on the endpoint: "
                        "give one to make re-running safe (default: a new one each run)")
    p.add_argument("--on-delivered", metavar="ENDPOINT",
                   help="an endpoint of the same team that gets the message's outcome record once delivered")
    p.add_argument("--on-failed", metavar="ENDPOINT",
                   help="an endpoint of the same team that gets its outcome record once its handler gave up")
    expiry = p.add_mutually_exclusive_group()
    expiry.add_argument("--expires-at", type=aware_time, metavar="ISO8601",
                        help="never handed over from this time on (after the due time): it ends expired")
    expiry.add_argument("--expire-after", type=seconds, metavar="SECONDS",
                        help="never handed over from this many seconds after its due time on: it ends expired")
    p.add_argument("--flow-key", metavar="KEY",
                   help="its flow key: the endpoint's per-key limits (max_deliveries_per_second_per_key, "
                        "max_concurrent_per_key) count it with the messages of the same key")
    p.add_argument("--debounce", metavar="KEY",
                   help="debounce by KEY on the endpoint: trailing, a newer message with the key replaces this one "
                        "while it waits; leading, this one is dropped within the first's window")
    p.add_argument("--debounce-seconds", type=int, metavar="N",
                   help="trailing: due N s after the newest; leading: the window")
    p.add_argument("--debounce-max-seconds", type=int, metavar="M",
                   help="trailing (required): never due later than M s after the window's first")
    p.add_argument("--debounce-mode", choices=["trailing", "leading"], help="default: trailing")

    for name, run, help in (("get", cmd_get, "show one message"),
                            ("cancel", cmd_cancel, "cancel a pending or published message"),
                            ("republish", cmd_republish, "send a failed message again")):
        _command(sub, name, run, help).add_argument("id", metavar="ID")

    p = _command(sub, "reschedule", cmd_reschedule, "move a pending or published message to a new time (same id)")
    p.add_argument("id", metavar="ID")
    _when(p, "deliver it")

    p = _command(sub, "list", cmd_list, "list messages, newest first: id, status, endpoint, due_at")
    p.add_argument("--endpoint")
    p.add_argument("--status", help=STATUSES)
    p.add_argument("--schedule", metavar="KEY", help="a schedule's runs")
    p.add_argument("--limit", type=at_least_zero, default=50, metavar="N", help="at most N messages (default: 50; 0: all)")

    p = _command(sub, "preview", cmd_preview, "the next run times of a cron rule or an interval, UTC, one a line")
    rule = p.add_mutually_exclusive_group(required=True)
    rule.add_argument("--cron", metavar="RULE", help="five fields, as in crontab: '30 2 * * 1-5'")
    rule.add_argument("--interval", type=positive, metavar="SECONDS", help="seconds between runs")
    p.add_argument("--timezone", metavar="IANA", help="the zone a --cron rule is read in (default: UTC)")
    p.add_argument("--start-at", type=aware_time, metavar="ISO8601", help="no run before (an interval's first run)")
    p.add_argument("--after", type=aware_time, metavar="ISO8601", help="runs after this time (default: now)")
    p.add_argument("--count", type=int, default=10, metavar="N", help="how many, 1 to 100 (default: 10)")

    p = _command(sub, "notifications", cmd_notifications,
                 "notification routes: list; add ENDPOINT TYPE...; show ID; remove ID")
    p.add_argument("action", nargs="?", default="list", choices=["list", "add", "show", "remove"])
    p.add_argument("args", nargs="*", metavar="ARG")

    p = _command(sub, "cancel-task", cmd_cancel_task, "cancel every waiting run of a Celery task id; prints how many")
    p.add_argument("task_id", metavar="TASK_ID")
    p.add_argument("--endpoint")

    p = _command(sub, "subscribe", cmd_subscribe, "subscribe an endpoint to a topic pattern; prints its id")
    p.add_argument("topic", metavar="PATTERN", help="dot-separated words, * one word, # zero or more: 'invoice.*'")
    p.add_argument("endpoint", metavar="ENDPOINT")
    p.add_argument("--filter", metavar="JSON", help='payload field paths to a value or values: \'{"a.b": [1, 2]}\'')
    p = _command(sub, "subscriptions", cmd_subscriptions, "list subscriptions, newest first")
    p.add_argument("--limit", type=at_least_zero, default=50, metavar="N", help="at most N (default: 50; 0: all)")
    _command(sub, "unsubscribe", cmd_unsubscribe, "delete a subscription").add_argument("id", metavar="ID")

    p = _command(sub, "publish", cmd_publish, "publish an event to a topic; prints its id")
    p.add_argument("topic", metavar="TOPIC")
    _when(p, "deliver")
    payload = p.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="JSON", help="the payload, any JSON but null (default: {}); - reads stdin")
    payload.add_argument("--payload-file", metavar="PATH", help="read the payload from a file (- : stdin)")
    payload.add_argument("stdin", nargs="?", choices=["-"], metavar="-", help="read the payload from stdin")
    p.add_argument("--idempotency-key", metavar="KEY", help="the platform answers the existing event for a key the "
                                                              "team has used (default: a new one each run)")
    _command(sub, "event", cmd_event, "show an event and its messages").add_argument("id", metavar="ID")
    _command(sub, "cancel-event", cmd_cancel_event,
             "cancel an event's waiting messages; prints how many").add_argument("id", metavar="ID")
    return parser


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """argparse, plus schedule's bare ``-`` (stdin) after its options: argparse matches that
    optional positional together with ENDPOINT, before the options, so a later one is left over."""
    args, extra = parser.parse_known_args(argv)
    if extra == ["-"] and getattr(args, "stdin", "-") is None:
        if args.payload is not None or args.payload_file is not None:
            parser.error("argument -: not allowed with argument --payload or --payload-file")
        args.stdin = "-"
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


# -- running -------------------------------------------------------------------------------------

def _first(reasons) -> str:
    reason = reasons[0] if isinstance(reasons, list) and reasons else reasons
    return reason if isinstance(reason, str) else json.dumps(reason)


def _reason(exc: errors.APIError) -> str:
    """The platform's reason; for a 400 every field it names, so one run shows all that must change."""
    body = exc.body
    if isinstance(exc, errors.BadRequest) and isinstance(body, dict) and "detail" not in body and len(body) > 1:
        return "; ".join(f"{name}: {_first(reasons)}" for name, reasons in body.items())
    return exc.detail


def error_line(exc: errors.DelayError, base_url: str | None) -> tuple[int, str]:
    """The exit status and the one line on stderr for what the client raised."""
    if isinstance(exc, errors.APIError):
        line = f"{exc.status} {_reason(exc)}"
        return EXIT_API, line + (f" (request {exc.request_id})" if exc.request_id else "")
    if isinstance(exc, errors.TransportError):
        return EXIT_UNREACHABLE, f"cannot reach the platform at {base_url}: {exc}"
    return EXIT_API, str(exc)


def _say(line: str) -> None:
    """One line on stderr, its control characters escaped (the platform's reason may quote input)."""
    print("".join(c if c.isprintable() else repr(c)[1:-1] for c in line), file=sys.stderr)


def _write(text: str) -> int:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (head): stop quietly, and keep the exit flush quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0, 1 API error, 2 usage, 3 unreachable)."""
    parser = build_parser()
    try:
        args = parse(parser, argv)
    except SystemExit as exc:  # --help, --version, or argparse's usage error (2)
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    base_url = None
    try:
        with make_client(args) as client:
            base_url = client.base_url
            document, text = args.run(client, args)
    except UsageError as exc:
        _say(f"{PROG}: {exc}")
        return EXIT_USAGE
    except errors.DelayError as exc:
        status, line = error_line(exc, base_url)
        _say(f"{PROG}: {line}")
        return status
    except (ValueError, KeyError, TypeError, httpx.HTTPError, httpx.InvalidURL) as exc:
        # an answer that is not the API's (a proxy's page, a redirect): still one line, no traceback
        _say(f"{PROG}: unexpected answer from {base_url} (is it the platform's URL?): {exc!r}")
        return EXIT_API
    except KeyboardInterrupt:
        return 130
    if args.json:
        return _write(json.dumps(document, indent=2))
    return _write(text) if text else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
