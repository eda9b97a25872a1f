"""The table `make bench` ends with: one row per case that ran (the median over the runs for v2
and v3, the comparisons — each figure's floor measured in the same run —, today's target for v3,
the default deployment, and whether it was met), from the results that bench/suite.py also
writes to artifacts/bench.json. The targets are issue 36's: delivered throughput at p99 ≤ 250 ms
≥ 10,000/s, the 100,000 burst p99 ≤ 2 s, webhooks ≥ 5,000 calls/s and ≥ half a bare async
client's, a healthy endpoint's p99 ≤ 250 ms beside a tarpit, another team's p99 ≤ 1 s beside a
flood, idle p99 ≤ 10 ms with none early; and those issue 23 met, kept: the 20,000 burst p99
≤ 400 ms, broker CPU ≤ 1/10 of the raw publisher's, scheduling ≥ 20,000/s and ≥ raw's."""

from __future__ import annotations

import statistics


def med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, unit="") -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}{unit}" if abs(value) >= 10 else f"{value:.1f}{unit}"


def pair(v2, v3, unit: str) -> str:
    """A comparison per version, "v2 / v3", or the one that ran."""
    if v2 is None or v3 is None:
        return fmt(v3 if v2 is None else v2, unit)
    return f"{fmt(v2, unit)} / {fmt(v3, unit)}"


def table_rows(r: dict) -> list[tuple]:
    """(case, v2, v3, comparison, target for v3, met) for each case that ran."""
    rows = []

    def each(case: str, key) -> list[float | None]:
        return [med([key(run, v) for run in r[case]]) for v in ("v2", "v3")]

    if "idle" in r:
        v2, v3 = each("idle", lambda run, v: run.get(v, {}).get("p99"))
        raw2, raw3 = each("idle", lambda run, v: run.get(f"raw_{v}", {}).get("p99"))
        native = med([run["native"]["p99"] for run in r["idle"] if "native" in run])
        ratio = native / v3 if native and v3 else None
        early = [sum(run.get(v, {}).get("early", 0) for run in r["idle"]) for v in ("v2", "v3")]
        compared = f"raw {pair(raw2, raw3, ' ms')}"
        if native is not None:
            compared += f"; {fmt(native, ' ms')} Celery native ({fmt(ratio, 'x')} v3's)"
        raw_early = [sum(run.get(f"raw_{v}", {}).get("early", 0) for run in r["idle"]) for v in ("v2", "v3")]
        ran = [v for v in ("v2", "v3") if v in r.get("versions", ("v2", "v3"))]
        early_compared = "raw " + " / ".join(str(n) for v, n in zip(("v2", "v3"), raw_early) if v in ran)
        if native is not None:
            early_compared += f"; {sum(run['native']['early'] for run in r['idle'])} Celery native"
        shown = [str(n) if v in ran else "—" for v, n in zip(("v2", "v3"), early)]
        rows += [("1 idle lateness p99", fmt(v2, " ms"), fmt(v3, " ms"), compared, "≤ 10 ms",
                  v3 is not None and v3 <= 10),
                 ("1 idle: early deliveries", *shown, early_compared, "0", "v3" in ran and early[1] == 0)]
    if "burst" in r:
        v2, v3 = each("burst", lambda run, v: run.get(v, {}).get("p99"))
        raw2, raw3 = each("burst", lambda run, v: run.get(f"raw_{v}", {}).get("p99"))
        native = med([run["native"]["p99"] for run in r["burst"] if "native" in run])
        offered = med([run["native"]["offered_per_s"] for run in r["burst"] if "native" in run])
        compared = f"raw {pair(raw2, raw3, ' ms')}"
        if native is not None:
            compared += f"; Celery native {fmt(native, ' ms')} (offered {fmt(offered, '/s')})"
        n = r["burst"][0].get("messages", 20000)
        rows.append((f"2 burst of {n:,} (1-4 s) p99", fmt(v2, " ms"), fmt(v3, " ms"), compared, "≤ 400 ms",
                     v3 is not None and v3 <= 400))
        c2, c3 = each("burst", lambda run, v: run.get(v, {}).get("broker_us_per_msg"))
        raw_c2, raw_c3 = each("burst", lambda run, v: run.get(f"raw_{v}", {}).get("broker_us_per_msg"))
        rows.append(("broker CPU per scheduled+delivered msg (burst)", fmt(c2, " µs"), fmt(c3, " µs"),
                     f"raw {pair(raw_c2, raw_c3, ' µs')}",
                     "≤ 1/10 of raw's", None if c3 is None or raw_c3 is None else c3 <= raw_c3 / 10))
    if "burst100k" in r:
        v2, v3 = each("burst100k", lambda run, v: run.get(v, {}).get("p99"))
        raw2, raw3 = each("burst100k", lambda run, v: run.get(f"raw_{v}", {}).get("p99"))
        c2, c3 = each("burst100k", lambda run, v: run.get(v, {}).get("broker_us_per_msg"))
        n = r["burst100k"][0].get("messages", 100_000)
        rows.append((f"2b burst of {n:,} (1-10 s) p99", fmt(v2, " ms"), fmt(v3, " ms"),
                     f"raw {pair(raw2, raw3, ' ms')}; broker {fmt(c3, ' µs')} a message (v3)",
                     "≤ 2 s", v3 is not None and v3 <= 2000))
    if "rate" in r:
        v2, v3 = each("rate", lambda run, v: run.get(v))
        raw2, raw3 = each("rate", lambda run, v: run.get(f"raw_{v}"))
        native, celery = med([run["native"] for run in r["rate"]]), med([run["celery"] for run in r["rate"]])
        rows.append(("3 scheduling rate", fmt(v2, "/s"), fmt(v3, "/s"),
                     f"raw {pair(raw2, raw3, '/s')}; "
                     f"Celery native {fmt(native, '/s')} (confirms), "
                     f"countdown {fmt(celery, '/s')} (no confirms)",
                     "≥ 20,000/s and ≥ raw's", v3 is not None and v3 >= 20000 and v3 >= (raw3 or 0)))
    if "holding" in r:
        h = r["holding"]
        rows.append(("4 holding cost (worker RSS)", "—", f"+{h['platform_mb']:.1f} MB",
                     f"≈ +{fmt(h['celery_mb_scaled_to_n'], ' MB')} Celery countdown "
                     f"({fmt(h['celery_kib_per_task'])} KiB/task over {h['celery_held']:,} held)",
                     f"≤ +10 MB for {h['messages']:,}", h["platform_mb"] <= 10))
        rows.append(("4 queue memory per message in flight", fmt(h.get("broker_bytes_per_msg_v2"), " B"),
                     fmt(h.get("broker_bytes_per_msg_v3"), " B"),
                     "bodies {} / {} per message".format(*[fmt(h.get(f"body_bytes_per_msg_{v}"), " B")
                                                          for v in ("v2", "v3")]), "—", None))
    if "head_of_line" in r:
        v2, v3 = each("head_of_line", lambda run, v: run.get(v))
        first = r["head_of_line"][0]

        def shown(value):
            return "not run within 60 s" if value is None else fmt(value, " ms")

        rows.append(("5 head of line", fmt(v2, " ms"), fmt(v3, " ms"),
                     f"Celery countdown {shown(first.get('celery'))}; "
                     f"Celery native {shown(first.get('native'))}",
                     "< 100 ms", v3 is not None and v3 < 100))
    if "throughput" in r:
        t = r["throughput"]
        ok = {v: (t.get(v) or {}).get("highest_ok") for v in ("v2", "v3")}
        levels = [stats for _, stats in sorted((t.get("v3") or {}).get("levels", {}).items(), key=lambda kv: int(kv[0]))]
        good = [s for s in levels if s["p99"] <= 250]
        best = max(good, key=lambda s: s.get("due_per_s", 0), default=None)
        last = levels[-1] if levels else None
        seen = "; ".join(f"{s.get('due_per_s', 0):,}/s reached: p99 {fmt(s['p99'], ' ms')}, CPU µs a message "
                         + ", ".join(f"{n.split(' ')[0]} {us:.0f}" for n, us in s.get("cpu_us_per_msg", {}).items())
                         + f", machine {s.get('machine_busy', 0):.0%} busy"
                         for s in [x for i, x in enumerate((best, last)) if x is not None and (i == 0 or x is not best)])
        v2, v3 = ("—" if v not in t else f"{ok[v] or 0:,}/s" for v in ("v2", "v3"))
        rows.append(("6 delivered throughput, p99 ≤ 250 ms (record only)", v2, v3, f"v3: {seen or '—'}",
                     "≥ 10,000/s", (ok["v3"] or 0) >= 10000))
    if "webhooks" in r:
        w = r["webhooks"]
        calls = med([run["calls_per_s"] for run in w])
        bare = {c: med([run["floor"][c]["calls_per_s"] for run in w if c in run["floor"]])
                for c in ("aiohttp", "httpx")}
        best = max([x for x in bare.values() if x is not None], default=None)
        receiver = med([run["receiver_cpu_s_per_1000"] for run in w])
        p50, p99 = med([run["late_receiver"]["p50"] for run in w]), med([run["late_receiver"]["p99"] for run in w])
        short = sum(run["messages"] - run["distinct"] for run in w)
        v3 = fmt(calls, "/s") + (f" (only {sum(run['distinct'] for run in w):,} of "
                                 f"{sum(run['messages'] for run in w):,} called)" if short else "")
        rows.append((f"7 webhooks, {w[0]['messages']:,} due at once: calls/s", "—", v3,
                     f"bare aiohttp {fmt(bare['aiohttp'], '/s')}, httpx {fmt(bare['httpx'], '/s')} "
                     f"(same receiver); receiver {receiver:.3f} CPU s per 1,000 calls; "
                     f"arrival p50 {fmt(p50, ' ms')} / p99 {fmt(p99, ' ms')} after due"
                     + (f"; {short:,} never called" if short else ""),
                     "≥ 5,000/s and ≥ half the bare client's",
                     not short and calls is not None and calls >= 5000 and best is not None and calls >= best / 2))
    if "tarpit" in r:
        runs = r["tarpit"]
        p99 = med([run["healthy"]["p99"] for run in runs])
        missing = sum(run["healthy"]["missing"] for run in runs)
        messages = sum(run["healthy"]["messages"] for run in runs)
        rows.append(("8a tarpit: healthy endpoint's webhooks p99", "—",
                     ("≥ " if missing else "") + fmt(p99, " ms"),
                     f"tarpit held {max(run['tarpit_held_at_once'] for run in runs)} calls at once; "
                     f"{missing} of {messages} healthy never called, "
                     f"{sum(run['healthy']['early'] for run in runs)} early", "≤ 250 ms",
                     p99 is not None and p99 <= 250 and not missing))
    if "flood" in r:
        f = r["flood"]
        late = f["team_b"]
        rows.append(("8b flood: other team's webhooks p99", "—",
                     ("≥ " if late["missing"] else "") + fmt(late["p99"], " ms"),
                     f"team A: {f['flood_called']:,} of {f['flood']:,} called (200 ms receiver, "
                     f"{fmt(f['flood_rate'], '/s')}); B: {late['missing']} of {late['messages']} never called",
                     "≤ 1 s", late["p99"] is not None and late["p99"] <= 1000 and not late["missing"]))
    rows += fanout_rows(r.get("fanout") or {})
    return rows


def fanout_rows(f: dict) -> list[tuple]:
    """Case 9: per load (fan-out x events/s asked), the event's figures beside the same load sent
    as separate messages: broker CPU per event and per delivered message, cascade messages per
    event, p99. No target: the issue asks for the figures side by side."""
    rows = []
    for key, event in f.items():
        if not key.startswith("event_"):
            continue
        load = key.removeprefix("event_")
        fan = int(load.split("x")[0])
        separate = f.get(f"separate_{load}", {})
        per_event = event["cascade_messages"] / event["events"] if event.get("events") else None
        rows.append((f"9 fan-out {fan} at {fmt(event['events_per_s_asked'], '/s')} events: broker CPU per event", "—",
                     f"{fmt(event['broker_us_per_event'], ' µs')} ({fmt(event['events_per_s'], '/s')} reached, "
                     f"p99 {fmt(event['p99'], ' ms')}, {fmt(per_event)} cascade msg/event)",
                     f"separate: {fmt(separate.get('broker_us_per_event'), ' µs')} "
                     f"({fmt(separate.get('events_per_s'), '/s')}, p99 {fmt(separate.get('p99'), ' ms')}); "
                     f"per delivered msg {fmt(event['broker_us_per_message'], ' µs')} vs "
                     f"{fmt(separate.get('broker_us_per_message'), ' µs')}; machine "
                     f"{event['machine_busy']:.0%} busy", "—", None))
    return rows


def print_table(rows: list[tuple]) -> None:
    header = ("case", "v2", "v3", "comparison", "target (v3)", "met")
    cells = [[str(c) for c in row[:5]] + ["—" if row[5] is None else ("met" if row[5] else "MISSED")]
             for row in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *cells)]
    for line in (header, *cells):
        print(" | ".join(str(x).ljust(w) for x, w in zip(line, widths)))
