"""One peer queue draining no-op jobs: `python -m bench.peer_proc pgqueuer|procrastinate URL N SETTING`.

Installs the peer's schema and enqueues N no-op jobs with its own batch API (not timed), then
drains them with one worker process and prints {"seconds", "maxrss_kb"} as JSON (its own peak
RSS: bench/peak_rss.py), seconds being
the span from the first job started to the last finished in the peer's own event table.
SETTING is Procrastinate's concurrency, or PgQueuer's batch_size, alone (one QueueManager) or
as MANAGERSxBATCH: that many QueueManagers in the one process, each on a connection of its own,
draining together (4x50: four of batch_size 50). A fifth argument, `enqueue` or `drain`, does
only that half (PgQueuer): the whole-process measure times a drain alone, and then also gets
"first" and "last", the database's epoch of the first job picked and the last one done, to
tell the process's start-up and its shutdown from its drain (the database runs on this host,
so its clock is the caller's).
"""

import asyncio
import json
import logging
import sys

from .peak_rss import own_peak_kb

CHUNK = 5000  # jobs per batch enqueue call


def pgqueuer_setting(setting):
    """(managers, batch_size) of a PgQueuer SETTING: "100" or "4x50"."""
    managers, _, batch = str(setting).rpartition("x")
    return int(managers or 1), int(batch)


async def pgqueuer(url, n, setting, enqueue=True, drain=True):
    """enqueue / drain False: only the other half (the whole-process measure times a drain alone).
    The drain's {"seconds", "first", "last"} (see the module's docstring), or None without one."""
    import psycopg
    from pgqueuer import PsycopgDriver, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.queries import Queries

    if enqueue:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        for start in range(0, n, CHUNK):
            size = min(CHUNK, n - start)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        await conn.close()
    if not drain:
        return None

    managers, batch_size = pgqueuer_setting(setting)

    async def one_manager():
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        manager = QueueManager(Queries(PsycopgDriver(conn)))

        @manager.entrypoint("noop")
        async def noop(job):
            return None

        await manager.run(batch_size=batch_size, mode=QueueExecutionMode.drain)
        await conn.close()

    await asyncio.gather(*(one_manager() for _ in range(managers)))
    # Its own log, as jobsweb's throughput is read from job_runs: first pick to last success.
    # (run() returns ~4 s after the last success: its shutdown waits for its buffers to time out.)
    first, last = database_row(url, "SELECT extract(epoch FROM min(created) FILTER (WHERE status = 'picked')), "
                                    "extract(epoch FROM max(created) FILTER (WHERE status = 'successful')) "
                                    "FROM pgqueuer_log")
    # No jobs (the CPU measure's empty drain, bench/process_measures.py): nothing in the log.
    return {"seconds": None if first is None else last - first, "first": first, "last": last}


def database_row(url, sql):
    import psycopg

    with psycopg.connect(url) as conn:
        return [None if value is None else float(value) for value in conn.execute(sql).fetchone()]


def procrastinate(url, n, concurrency):
    import procrastinate as p

    app = p.App(connector=p.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop():
        return None

    with app.open():
        app.schema_manager.apply_schema()
        for start in range(0, n, CHUNK):
            noop.batch_defer(*({} for _ in range(min(CHUNK, n - start))))
    app.run_worker(wait=False, concurrency=concurrency, install_signal_handlers=False,
                   fetch_job_polling_interval=0.1)
    return {"seconds": database_row(url, "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') "
                                         "- min(at) FILTER (WHERE type = 'started')) FROM procrastinate_events")[0]}


def main():
    logging.basicConfig(level=logging.WARNING)
    peer, url, n, setting = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    only = sys.argv[5] if len(sys.argv) > 5 else None  # enqueue | drain: one half (PgQueuer only)
    if peer == "pgqueuer":
        figures = asyncio.run(pgqueuer(url, n, setting, enqueue=only != "drain", drain=only != "enqueue"))
    else:
        figures = procrastinate(url, n, int(setting))
    print(json.dumps({**(figures or {}), "maxrss_kb": own_peak_kb()}))


if __name__ == "__main__":
    main()
