"""The benchmark's CPU per run (bench/process_measures.py, §12) counts PostgreSQL's CPU in the
backends of connections that have closed, and the command's own CPU apart from it.

A drain's backends exit with the worker, before anything can read their /proc entries: only
the postmaster's count of its reaped children holds their CPU. Left out, PostgreSQL's share of a
run would read as nothing.
"""

import os
import sys

import psycopg
from sqlalchemy.engine import make_url

from bench import process_measures

# Half a second or so of one backend's CPU, then the connection closes with the process.
SERVER_WORK = ("import psycopg, sys\n"
               "with psycopg.connect(sys.argv[1]) as conn:\n"
               "    conn.execute('SELECT count(*) FROM generate_series(1, 5000000)').fetchone()")
# About as much of the command's own CPU, and no database at all.
CLIENT_WORK = ("import time\n"
               "began = time.process_time()\n"
               "while time.process_time() - began < 0.5:\n"
               "    pass")


def test_cpu_of_counts_an_exited_backends_cpu_as_the_servers_and_the_commands_own_apart(postgres_server):
    admin, _ = postgres_server
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_cpu_probe WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_cpu_probe")
    url = make_url(admin).set(database="bench_cpu_probe").render_as_string(hide_password=False)
    postmaster = process_measures._postmaster(url)
    try:
        server, client = process_measures._cpu_of([sys.executable, "-c", SERVER_WORK, url], os.environ, postmaster,
                                                  "bench_cpu_probe")
        assert server >= 0.25, (server, client)  # the count ran in a backend that has exited since
        server, client = process_measures._cpu_of([sys.executable, "-c", CLIENT_WORK], os.environ, postmaster,
                                                  "bench_cpu_probe")
        assert client >= 0.5 and server < 0.1, (server, client)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("DROP DATABASE bench_cpu_probe WITH (FORCE)")


def test_cpu_of_two_processes_counts_both_processes_own_cpu(postgres_server):
    admin, _ = postgres_server
    postmaster = process_measures._postmaster(admin)
    server, client = process_measures._cpu_of([sys.executable, "-c", CLIENT_WORK], os.environ, postmaster,
                                              "no_such_database", processes=2)
    assert client >= 1.0 and server < 0.1, (server, client)
