"""Seams of workflows (issue 35): an operator's cancel, retry and delete of a run that
`seams_dependents` waiting runs wait for, each from the run's page (POST through the Flask test
client, so the request's round-trip bound and the server's statement_timeout apply), with
job_runs analysed before the waiting runs came (as autovacuum leaves a table that grew at once)."""

import re
import time

import psycopg

from .measures import migrated

PASSWORD = "bench password 1"
# Statements of the measured database still running after a request answered (there must be none).
# Client backends only: the autovacuum that thousands of updated runs set off is active there too.
STILL_ACTIVE = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
"""


def _signed_in(app):
    from jobsweb.core.database import db
    from jobsweb.web.accounts import create_user

    with app.app_context():
        create_user("bench-operator@example.org", PASSWORD, "admin")
        db.session.commit()
    client = app.test_client()
    client.post("/sign-in", data={"csrf_token": _token(client, "/sign-in"), "email": "bench-operator@example.org",
                                  "password": PASSWORD})
    return client, _token(client, "/")  # signing in starts a new session, with its own token


def _token(client, path):
    return re.search(r'name="csrf-token" content="([^"]+)"', client.get(path).get_data(as_text=True)).group(1)


def wide_graph(bench):
    """Seconds of the cancel, the retry and the delete of the root, from the web; what each left."""
    from jobsweb import enqueue, enqueue_many

    n = bench.sizes["seams_dependents"]
    url, app = migrated(bench, "bench_seams")
    with app.app_context():
        enqueue_many("jobsweb.noop", [{}] * 100)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE job_runs")
        conn.execute("ANALYZE job_run_deps")
    with app.app_context():
        root = enqueue("jobsweb.noop", run_at=None, queue="held")
        enqueue_many("jobsweb.noop", [{}] * n, after=[root])
    client, token = _signed_in(app)
    out = {"dependents": n}
    for action, path, expect in (("cancel", f"/runs/{root}/cancel", ("cancelled", f"run {root} ended cancelled")),
                                 ("retry", f"/runs/{root}/retry", ("waiting", None)),
                                 ("delete", f"/runs/{root}/delete", ("cancelled", f"run {root} was deleted"))):
        started = time.perf_counter()
        response = client.post(path, data={"csrf_token": token})
        seconds = time.perf_counter() - started
        with psycopg.connect(url, autocommit=True) as conn:
            active = conn.execute(STILL_ACTIVE).fetchone()[0]
            done = conn.execute("SELECT count(*) FROM job_runs WHERE id > %s AND status = %s "
                                "AND reason IS NOT DISTINCT FROM %s", [root, *expect]).fetchone()[0]
        out[action] = {"seconds": seconds, "status_code": response.status_code, "changed": done,
                       "active_after": active}
        bench.log(f"{action} of a run {n:,} runs wait for, from its page: {seconds:.2f} s, HTTP "
                  f"{response.status_code}, {done:,} runs {expect[0]}, {active} statements still active")
        if active:
            raise RuntimeError(f"{action}: a statement still runs after the request answered: {out[action]}")
    return out


def seams_section(r):
    """§17: the wide graph's cancel, retry and delete from the web."""
    s = r["seams"]
    rows = [f"| {action} | {s[action]['seconds']:.2f} | {s[action]['status_code']} | {s[action]['changed']:,} | "
            f"{s[action]['active_after']} |" for action in ("cancel", "retry", "delete")]
    return [
        "## 17. A wide workflow graph from the web",
        "",
        f"A queued run that {s['dependents']:,} waiting runs wait for (`enqueue_many(..., after=[root])`, "
        "job_runs analysed before they came), cancelled, retried and deleted on its page (POST through "
        "the Flask test client: the action's round trips bounded at 15 s, its statements at 14.5 s by the "
        "server). Target: ≤ 5 s each, nothing left running:",
        "",
        "| action | seconds | HTTP | runs changed below | statements active after |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
