"""Case 8, isolation: one receiver, endpoint or team must not hold up another. Written against the
public interface only (webhook endpoints made through the API, messages through the bulk API, the
platform's default settings), so it judges whichever delivery engine runs. Lateness is the
receiver's arrival of each message's first call (its ``webhook-id``) minus the message's due
time; a message that has not arrived when the case stops counts as late by at least the time it
has waited (``missing``), so the p99 is then a lower bound.

- ``tarpit``: endpoint T's receiver takes each request and trickles a byte of an answer every 5 s,
  never finishing; 128 messages to T are due at once, then 300 to a healthy endpoint H (a cheap
  receiver) due evenly over 10 s: H's p99 (target ≤ 250 ms).
- ``flood``: team A has 50,000 messages due at once to a slow receiver (it answers each call after
  200 ms); team B, another team, sends 50 a second for 20 s, each due 1 s later, to a fast
  receiver: B's p99 (target ≤ 1 s).

Afterwards each case cancels what its endpoints have left (and makes the slow receiver fast), so
that its leftovers do not weigh on what runs next.
"""

from __future__ import annotations

import time

from bench.measure import percentiles
from bench.receiver import Receiver

TEAM_B = "bench-b"


def lateness(arrivals: list[tuple[float, str]], due: dict[str, float], until: float) -> dict:
    """Percentiles of first arrival minus due (ms) over every message in ``due``; one not yet
    arrived counts as ``until`` minus due (a lower bound)."""
    first: dict[str, float] = {}
    for t, message_id in arrivals:
        first.setdefault(message_id, t)
    late, missing = [], 0
    for message_id, due_at in due.items():
        if message_id in first:
            late.append((first[message_id] - due_at) * 1000)
        else:
            missing += 1
            late.append((until - due_at) * 1000)
    return {**percentiles(late), "messages": len(due), "missing": missing,
            "early": sum(x < 0 for x in late), "duplicates": len(arrivals) - len(first)}


def _wait_calls(receiver: Receiver, n: int, until: float) -> None:
    while receiver.count() < n and time.time() < until:
        time.sleep(0.25)


def tarpit(b, version: str = "v3") -> dict:
    stuck, healthy, spread, wait_s = 128, 300, 10.0, 30.0 if b.quick else 60.0
    with Receiver("tarpit", processes=1, trickle_s=5.0) as tar, Receiver(processes=1) as ok:
        t = b.endpoint("tarpit", version, handler="webhook", handler_target=tar.url)
        h = b.endpoint("healthy", version, handler="webhook", handler_target=ok.url)
        start = time.time()
        b.post(b.bodies_due(t, [start + 2.0] * stuck))
        first_h = start + 3.0
        b.post(b.bodies_due(h, [first_h + spread * i / healthy for i in range(healthy)]))
        _wait_calls(ok, healthy, first_h + spread + wait_s)
        until = time.time()
        late = lateness(ok.arrivals(), b.due_at(h), until)
        held = tar.status()
    # the tarpit closed (its calls fail now), what T has left is cancelled
    result = {"healthy": late, "tarpit_calls": held["count"], "tarpit_held_at_once": held["most_in_flight"],
              "tarpit_connections": held["connections"], "waited_s": until - first_h,
              "tarpit_cancelled": b.cancel(t), "healthy_cancelled": b.cancel(h)}
    print(f"  tarpit: H p99 {late['p99']:,.0f} ms (p50 {late['p50']:,.0f}), {late['missing']} of {healthy} not "
          f"arrived after {until - first_h:.0f} s, {late['early']} early; T's receiver got {held['count']} calls "
          f"on {held['connections']} connections, held {held['most_in_flight']} at once", flush=True)
    return result


def flood(b, version: str = "v3") -> dict:
    flood_n = 10000 if b.quick else 50000
    b_rate, b_seconds, tick = 50, (10 if b.quick else 20), 0.2
    lead, wait_s = (5.0, 30.0) if b.quick else (8.0, 60.0)
    key_b = b.team_key(TEAM_B)
    with Receiver("slow", processes=2, hold_s=0.2) as slow, Receiver(processes=1) as fast:
        a = b.endpoint("flood", version, handler="webhook", handler_target=slow.url)
        e_b = b.endpoint("trickle", version, key=key_b, handler="webhook", handler_target=fast.url)
        due_a = time.time() + lead
        b.post(b.bodies_due(a, [due_a] * flood_n))
        posted = time.time()
        # team B: from one second before A's due time, b_rate a second, each message due 1 s later
        time.sleep(max(0.0, due_a - 1.0 - time.time()))
        started = time.time()
        for k in range(int(b_seconds / tick)):
            b.schedule(e_b, [1.0] * int(b_rate * tick), clients=1, key=key_b)
            time.sleep(max(0.0, started + (k + 1) * tick - time.time()))
        sent_b = int(b_seconds / tick) * int(b_rate * tick)
        _wait_calls(fast, sent_b, time.time() + 1.0 + wait_s)
        until = time.time()
        late = lateness(fast.arrivals(), b.due_at(e_b), until)
        a_calls = slow.status()
        result = {"team_b": late, "flood": flood_n, "flood_called": a_calls["count"],
                  "flood_in_flight_at_most": a_calls["most_in_flight"], "flood_posted_before_due_s": due_a - posted,
                  "flood_rate": a_calls["count"] / max(0.001, until - due_a), "waited_s": until - started}
        print(f"  flood: B p99 {late['p99']:,.0f} ms (p50 {late['p50']:,.0f}), {late['missing']} of {sent_b} not "
              f"arrived, {late['early']} early; A: {a_calls['count']:,} of {flood_n:,} called in "
              f"{until - due_a:.0f} s, at most {a_calls['most_in_flight']} in flight", flush=True)
        # clean up: A's receiver fast, A's rest cancelled, until its calls stop for 3 s (2 min at most)
        slow.set_mode("ok")
        result["flood_cancelled"], result["b_cancelled"] = b.cancel(a), b.cancel(e_b, key_b)
        last, quiet_since, give_up = -1, time.time(), time.time() + 120
        while time.time() < give_up and time.time() - quiet_since < 3:
            time.sleep(0.5)
            count = slow.count()
            if count != last:
                last, quiet_since = count, time.time()
    return result
