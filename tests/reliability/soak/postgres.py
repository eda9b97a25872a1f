"""A PostgreSQL server of the soak's own, with PostgreSQL's stock settings.

Why not a database on the machine's shared server: that server may be tuned for tests (this
machine's turns autovacuum off, in /etc/postgresql/15/main/conf.d/90-ci.conf), and without
autovacuum no deleted row's space is ever reused, so the table grows whatever the prune does (the
first trial run: 5.8 MB to 17.4 MB in under three minutes). A deployment runs PostgreSQL as its
package installs it, autovacuum on; so does the soak. Its own server also keeps its connection
count and its load apart from other users of the machine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

BIN_ROOT = Path("/usr/lib/postgresql")
USER = "postgres"  # initdb and postgres refuse to run as root


def _bin(name: str) -> str:
    versions = sorted((p for p in BIN_ROOT.glob("*/bin") if (p / name).exists()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if not versions:
        raise RuntimeError(f"no PostgreSQL server binaries under {BIN_ROOT} (run: scripts/services.sh postgres)")
    return str(versions[-1] / name)


class PrivatePostgres:
    """``initdb`` in ``base``, listening on 127.0.0.1:``port`` only (its socket in ``base`` too),
    trust authentication for local connections, ``settings`` (postgresql.conf lines) on top of the
    stock ones; stopped and removed on exit."""

    def __init__(self, base: Path, port: int, settings: dict | None = None):
        self.base, self.port, self.settings = base, port, settings or {}
        self.data = base / "data"
        self.url = f"postgres://postgres@127.0.0.1:{port}"

    def _as_postgres(self, *args: str, timeout: float = 120) -> None:
        result = subprocess.run(["runuser", "-u", USER, "--", *args], capture_output=True, text=True, timeout=timeout)
        if result.returncode:
            raise RuntimeError(f"{Path(args[0]).name} failed: {(result.stderr or result.stdout).strip()[-500:]}")

    def __enter__(self) -> PrivatePostgres:
        self.base.mkdir(parents=True, exist_ok=True)
        shutil.chown(self.base, USER, USER)
        self._as_postgres(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                          "--locale=C.UTF-8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.base}'\n")
            conf.write("".join(f"{name} = {value}\n" for name, value in self.settings.items()))
        self._as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"), "-w", "start")
        return self

    def __exit__(self, *exc) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.base, ignore_errors=True)
