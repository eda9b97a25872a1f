"""The table `make bench` ends with: one row per case that ran (the median over the runs for v2
and v3, the comparisons, the target for v3 and whether it was met), from the results that
bench/suite.py also writes to artifacts/bench.json."""

from __future__ import annotations

import statistics


def med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, unit="") -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}{unit}" if abs(value) >= 10 else f"{value:.1f}{unit}"


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
        compared = f"raw {fmt(raw2, ' ms')} / {fmt(raw3, ' ms')}"
        if native is not None:
            compared += f"; {fmt(native, ' ms')} Celery native ({fmt(ratio, 'x')} v3's)"
        raw_early = [sum(run.get(f"raw_{v}", {}).get("early", 0) for run in r["idle"]) for v in ("v2", "v3")]
        early_compared = f"raw {raw_early[0]} / {raw_early[1]}"
        if native is not None:
            early_compared += f"; {sum(run['native']['early'] for run in r['idle'])} Celery native"
        rows += [("1 idle lateness p99", fmt(v2, " ms"), fmt(v3, " ms"), compared,
                  "≤ 10 ms, ≥ 30x lower than Celery native",
                  v3 is not None and v3 <= 10 and (native is None or (ratio or 0) >= 30)),
                 ("1 idle: early deliveries", str(early[0]), str(early[1]), early_compared, "0", early[1] == 0)]
    if "burst" in r:
        v2, v3 = each("burst", lambda run, v: run.get(v, {}).get("p99"))
        raw2, raw3 = each("burst", lambda run, v: run.get(f"raw_{v}", {}).get("p99"))
        native = med([run["native"]["p99"] for run in r["burst"] if "native" in run])
        offered = med([run["native"]["offered_per_s"] for run in r["burst"] if "native" in run])
        compared = f"raw {fmt(raw2, ' ms')} / {fmt(raw3, ' ms')}"
        if native is not None:
            compared += f"; Celery native {fmt(native, ' ms')} (offered {fmt(offered, '/s')})"
        rows.append(("2 burst lateness p99", fmt(v2, " ms"), fmt(v3, " ms"), compared, "≤ 400 ms",
                     v3 is not None and v3 <= 400))
        c2, c3 = each("burst", lambda run, v: run.get(v, {}).get("broker_us_per_msg"))
        rows.append(("broker CPU per scheduled+delivered msg (burst)", fmt(c2, " µs"), fmt(c3, " µs"),
                     "raw {} / {}".format(*[fmt(x, " µs") for x in each("burst", lambda run, v: run.get(
                         f"raw_{v}", {}).get("broker_us_per_msg"))]),
                     "v3 ≤ half of v2", c2 is not None and c3 is not None and c3 <= c2 / 2))
    if "burst100k" in r:
        v2, v3 = each("burst100k", lambda run, v: run.get(v, {}).get("p99"))
        raw2, raw3 = each("burst100k", lambda run, v: run.get(f"raw_{v}", {}).get("p99"))
        c2, c3 = each("burst100k", lambda run, v: run.get(v, {}).get("broker_us_per_msg"))
        rows.append(("2b burst of 100,000 (1-10 s) p99", fmt(v2, " ms"), fmt(v3, " ms"),
                     f"raw {fmt(raw2, ' ms')} / {fmt(raw3, ' ms')}; broker {fmt(c3, ' µs')} a message (v3)",
                     "≤ 2,000 ms", v3 is not None and v3 <= 2000))
    if "rate" in r:
        v2, v3 = each("rate", lambda run, v: run.get(v))
        raw2, raw3 = each("rate", lambda run, v: run.get(f"raw_{v}"))
        native, celery = med([run["native"] for run in r["rate"]]), med([run["celery"] for run in r["rate"]])
        rows.append(("3 scheduling rate", fmt(v2, "/s"), fmt(v3, "/s"),
                     f"raw {fmt(raw2, '/s')} / {fmt(raw3, '/s')}; "
                     f"Celery native {fmt(native, '/s')} (confirms), "
                     f"countdown {fmt(celery, '/s')} (no confirms)",
                     "≥ 5,000/s", v3 is not None and v3 >= 5000))
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
        rows.append(("6 delivered throughput, p99 ≤ 250 ms", f"{ok['v2'] or 0:,}/s", f"{ok['v3'] or 0:,}/s",
                     "—", "≥ 2,000/s", (ok["v3"] or 0) >= 2000))
    return rows


def print_table(rows: list[tuple]) -> None:
    header = ("case", "v2", "v3", "comparison", "target (v3)", "met")
    cells = [[str(c) for c in row[:5]] + ["—" if row[5] is None else ("met" if row[5] else "MISSED")]
             for row in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *cells)]
    for line in (header, *cells):
        print(" | ".join(str(x).ljust(w) for x, w in zip(line, widths)))
