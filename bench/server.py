"""A fresh, durable PostgreSQL for one benchmark run, with pg_stat_statements loaded: either of
the two servers jobsweb is measured on (tests/servers.py starts them)."""

import os
import subprocess
import tempfile
import time

import psycopg

from tests import servers

DATABASE = "jobsweb_bench"
KINDS = servers.KINDS
# Durable as in production (fsync, synchronous_commit): commits cost a real WAL flush. Set on
# both servers alike; everything else is the server's own, JIT included (on, on the stock one).
SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "max_connections": "200",
    "shared_buffers": "256MB",
}
# What the report says about each server, read back from the server itself.
DESCRIBED = ("server_version", "jit", "jit_above_cost", "jit_inline_above_cost", "jit_optimize_above_cost",
             "shared_buffers", "max_connections", "work_mem", "random_page_cost", "fsync", "synchronous_commit",
             "wal_sync_method")


class Server:
    """Start with Server.start(kind); stop() deletes its data directory."""

    def __init__(self, handle):
        self.handle = handle
        self.kind = handle.kind
        self.admin_url = handle.get_uri("postgres")
        self.url = handle.get_uri(DATABASE)
        self.migrated_template = None  # a database at jobsweb's head that measures copy (bench/measures.py)

    @classmethod
    def start(cls, kind):
        server = cls(servers.start(kind, settings=SETTINGS, prefix=f"jobsweb-bench-{kind}-"))
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        return server

    def bin(self, name):
        """A program of this server's own build (pgbench of the same version)."""
        return self.handle.bin(name)

    def fresh_database(self, name):
        """An empty database `name` on this server (dropped first if it exists); its URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        url = self.handle.get_uri(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        return url

    def copy_database(self, template, name):
        """A database `name` copied from `template` (dropped first if it exists); its URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        return self.handle.get_uri(name)

    def version(self):
        with psycopg.connect(self.url) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def describe(self):
        """{setting: value} of what the report shows about this server, plus whether it can JIT."""
        with psycopg.connect(self.url) as conn:
            out = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in DESCRIBED}
            # jit = on does nothing on a build without LLVM; pg_jit_available() says whether this one
            # can, but only with jit on in the session asking.
            conn.execute("SET jit = on")
            out["jit_available"] = conn.execute("SELECT pg_jit_available()").fetchone()[0]
            # Every client of the suite connects this way: a Unix socket spares each round trip
            # the loopback TCP stack.
            host = conn.info.host
            out["connection"] = ("Unix socket" if host.startswith("/") else
                                 f"TCP {host}, password ({conn.execute('SHOW password_encryption').fetchone()[0]})")
        return out

    def set_system(self, settings):
        """ALTER SYSTEM SET each setting (None: RESET it) and reload; returns once new sessions get
        them. A plan an open session keeps has the JIT decision made when it was planned, so
        measure over new connections."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            loaded = conn.execute("SELECT pg_conf_load_time()").fetchone()[0]
            for name, value in settings.items():
                conn.execute(f"ALTER SYSTEM RESET {name}" if value is None else f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        # The postmaster rereads its files when the signal reaches it, after pg_reload_conf has
        # returned; a new session inherits its load time.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with psycopg.connect(self.url) as conn:
                if conn.execute("SELECT pg_conf_load_time() > %s", [loaded]).fetchone()[0]:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"the {self.kind} server did not reload its configuration within 10 s")

    def stop(self):
        self.handle.cleanup()


def pgbench(server, url, script, *, clients, transactions):
    """Run pgbench with `script` and return its transactions per second (excluding connecting)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    try:
        out = subprocess.run([server.bin("pgbench"), "-n", "-M", "prepared", "-c", str(clients),
                              "-j", str(min(clients, os.cpu_count() or 1)), "-t", str(transactions),
                              "-f", f.name, url], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    for line in out.splitlines():
        if line.startswith("tps = "):
            return float(line.split()[2])
    raise RuntimeError(f"pgbench printed no tps:\n{out}")
