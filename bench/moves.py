"""The rate of moving messages: N messages in flight on v1 (delays of hours, so nothing moves on its
own), then `migrate_delays --from v1 --to v2`; prints messages/s and checks nothing was left.

    .venv/bin/python -m bench.moves [--messages 10000] [--batch 500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.measure import idle_share
from harness.paths import ARTIFACTS, ROOT
from harness.platform import platform
from harness.waiting import wait_until


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    idle = idle_share()
    with platform() as p:
        subprocess.run([sys.executable, "manage.py", "provision_delays", "--version", "all"], cwd=ROOT, env=p.env,
                       check=True, capture_output=True)
        p.start_worker(concurrency=2)
        p.api("POST", "/api/endpoints/", json={"name": "bench-migrate", "topology": "v1"})
        for start in range(0, args.messages, 1000):
            n = min(1000, args.messages - start)
            p.api("POST", "/api/messages/bulk/", json={"messages": [
                {"endpoint": "bench-migrate", "payload": {"i": start + i}, "delay_seconds": 3600 + (start + i) % 7200}
                for i in range(n)]})
        wait_until(lambda: p.sql("SELECT count(*) FROM scheduling_scheduledmessage WHERE status = 'published'")[0][0]
                   >= args.messages, 300, 0.5, "all published")
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "manage.py", "migrate_delays", "--from", "v1", "--to", "v2",
                                 "--batch", str(args.batch)], cwd=ROOT, env=p.env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if result.returncode:
            raise SystemExit(result.stderr)
        moved_rows = p.sql("SELECT count(*) FROM scheduling_scheduledmessage m JOIN scheduling_topologyversion t "
                           "ON t.id = m.topology_id WHERE t.name = 'v2'")[0][0]
    figures = {"messages": args.messages, "batch": args.batch, "seconds": round(seconds, 2),
               "per_second": round(args.messages / seconds), "rows_on_v2": moved_rows,
               "machine_idle_share_before": round(idle, 2)}
    print(result.stdout.strip().splitlines()[-1])
    print(f"migrate_delays: {args.messages} in-flight messages in {seconds:.1f} s = {figures['per_second']}/s "
          f"(command wall time, including Django start-up); rows now on v2: {moved_rows}")
    (ARTIFACTS / "bench-moves.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
