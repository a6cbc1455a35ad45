"""One peer queue draining no-op jobs: `python -m bench.peer_proc pgqueuer|procrastinate URL N SETTING`.

Installs the peer's schema and enqueues N no-op jobs with its own batch API (not timed), then
drains them with one worker process and prints {"seconds", "maxrss_kb"} as JSON, seconds being
the span from the first job started to the last finished in the peer's own event table.
SETTING is PgQueuer's batch_size or Procrastinate's concurrency. A fifth argument, `enqueue`
or `drain`, does only that half (PgQueuer): the whole-process measure times a drain alone.
"""

import asyncio
import json
import logging
import resource
import sys

CHUNK = 5000  # jobs per batch enqueue call


async def pgqueuer(url, n, batch_size, enqueue=True, drain=True):
    """enqueue / drain False: only the other half (the whole-process measure times a drain alone)."""
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
        return 0.0

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    manager = QueueManager(Queries(PsycopgDriver(conn)))

    @manager.entrypoint("noop")
    async def noop(job):
        return None

    await manager.run(batch_size=batch_size, mode=QueueExecutionMode.drain)
    await conn.close()
    # Its own log, as jobsweb's throughput is read from job_runs: first pick to last success.
    # (The drain call itself also waits ~4 s for its buffers to time out on shutdown.)
    return database_span(url, "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful') "
                              "- min(created) FILTER (WHERE status = 'picked')) FROM pgqueuer_log")


def database_span(url, sql):
    import psycopg

    with psycopg.connect(url) as conn:
        return float(conn.execute(sql).fetchone()[0])


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
    return database_span(url, "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') "
                              "- min(at) FILTER (WHERE type = 'started')) FROM procrastinate_events")


def main():
    logging.basicConfig(level=logging.WARNING)
    peer, url, n, setting = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    only = sys.argv[5] if len(sys.argv) > 5 else None  # enqueue | drain: one half (PgQueuer only)
    if peer == "pgqueuer":
        seconds = asyncio.run(pgqueuer(url, n, setting, enqueue=only != "drain", drain=only != "enqueue"))
    else:
        seconds = procrastinate(url, n, setting)
    print(json.dumps({"seconds": seconds, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
