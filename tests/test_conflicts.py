"""Conflicts are not outages: a transaction PostgreSQL rolled back for a serialization failure
(40001) or a deadlock (40P01) is run again at once, logged as what it is once a minute at most,
and never backs a worker off as for a database that went away (core/conflicts.py)."""

import logging
import signal
import subprocess
import sys

import pytest

from jobsweb.core import conflicts
from jobsweb.core.database import libpq_url
from jobsweb.engine.link import Conflicted, Link
from tests.conftest import committed, csrf_token, wait_for
from tests.forkserver import python_m
from tests.processes import add_many, finish

# Fails with SQLSTATE `state` while the sequence's next value is at most `fails`: a transaction
# that meets a conflict the first `fails` times it runs (a sequence is not rolled back with it).
FAILING = """DO $$ BEGIN
    IF nextval('test_conflict_runs') <= {fails} THEN
        RAISE EXCEPTION 'could not serialize access (a test''s own)' USING ERRCODE = '{state}';
    END IF;
END $$"""


@pytest.fixture
def conflict_runs(sql):
    sql("DROP SEQUENCE IF EXISTS test_conflict_runs")
    sql("CREATE SEQUENCE test_conflict_runs")
    # How many times it was counted since its last restart.
    yield lambda: sql("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM test_conflict_runs")[0][0]
    sql("DROP SEQUENCE test_conflict_runs")


@pytest.fixture
def clock(monkeypatch):
    """The conflicts' log clock, moved by hand: now[0] seconds."""
    now = [1000.0]
    monkeypatch.setattr(conflicts, "tally", conflicts._Tally(clock=lambda: now[0]))
    return now


def test_a_serialization_failure_is_run_again_at_once_and_logged_once_a_minute(
        database_url_for_tests, conflict_runs, clock, caplog):
    link = Link(libpq_url(database_url_for_tests))
    caplog.set_level(logging.INFO)
    try:
        assert link.fetch(FAILING.format(fails=2, state="40001")) == []
        assert conflict_runs() == 3  # two conflicts, then the run that went through
        connection = link.conn
        clock[0] += 59.0
        link.fetch("ALTER SEQUENCE test_conflict_runs RESTART")
        assert link.fetch(FAILING.format(fails=3, state="40001")) == []
        assert conflict_runs() == 4
        assert link.conn is connection  # the same session: nothing was lost, nothing reopened
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1, lines  # 5 conflicts within a minute: one line
        assert lines[0].startswith("serialization failure (could not serialize access (a test's own)): "
                                   "transaction run again at once; 1 conflict(s)")
        clock[0] += 1.0  # a minute after that line
        link.fetch("ALTER SEQUENCE test_conflict_runs RESTART")
        link.fetch(FAILING.format(fails=1, state="40001"))
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2 and "; 5 conflict(s) of this kind in the last 60 s" in lines[1], lines
        assert not [line for line in lines if "unavailable" in line]
    finally:
        link.close()


def test_a_deadlock_is_its_own_kind_and_one_that_never_clears_is_a_conflict_not_an_outage(
        database_url_for_tests, conflict_runs, clock, caplog):
    link = Link(libpq_url(database_url_for_tests))
    caplog.set_level(logging.INFO)
    try:
        link.fetch(FAILING.format(fails=1, state="40P01"))
        link.fetch("ALTER SEQUENCE test_conflict_runs RESTART")
        with pytest.raises(Conflicted) as raised:
            link.fetch(FAILING.format(fails=1000, state="40001"))
        assert conflict_runs() == 8  # run 8 times, then given up
        lines = [r.getMessage() for r in caplog.records]
        assert [line.split(" (")[0] for line in lines] == ["deadlock", "serialization failure",
                                                           "serialization failure"], lines
        assert "transaction given up after 8 run(s); 1 given up" in lines[2]
        assert "could not serialize access" in str(raised.value)
        # The worker takes it back without an outage: no line, no backoff, nothing in doubt.
        from jobsweb.engine.worker.outages import Outages

        outages = Outages(stop=None, links=[])
        assert outages.step(raised.value) is None
        assert (outages.delay, outages.since, outages.claims_in_doubt()) == (0.5, None, False)
        assert len(caplog.records) == 3
    finally:
        link.close()


@pytest.fixture
def serializable(database_url_for_tests, sql):
    """The test database with default_transaction_isolation = serializable, as some teams set
    it database-wide; for the sessions opened from now on."""
    database = sql("SELECT current_database()")[0][0]
    sql(f"ALTER DATABASE {database} SET default_transaction_isolation = serializable")
    yield
    sql(f"ALTER DATABASE {database} RESET default_transaction_isolation")


RUNS = 1000
RETRIED = 200  # dead runs the admin's bulk action retries while the workers run


def test_under_serializable_isolation_workers_and_the_admin_meet_conflicts_without_an_outage(
        serializable, app, sql, sign_in, spawn_worker, tmp_path, caplog, figures):
    caplog.set_level(logging.INFO)
    ids = add_many(app, "test.record", RUNS)
    sql("UPDATE job_runs SET run_at = now() + interval '1 hour'")  # due once every worker is up
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'conflict drill' "
        "FROM generate_series(1, %s)", [RETRIED])
    logs = [tmp_path / f"worker-{n}.log" for n in range(3)]
    workers = [spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "4", output=open(log, "w+"),
                            JOBSWEB_LEASE_SECONDS=5) for log in logs]
    wait_for(lambda: sql("SELECT count(*) FROM job_workers")[0][0] == 3, message="three workers registered")
    client = sign_in("operator")
    with app.app_context():
        from jobsweb.core.database import db
        from sqlalchemy import text

        assert db.session.execute(text("SHOW default_transaction_isolation")).scalar() == "serializable"
        db.session.rollback()

    sql("UPDATE job_runs SET run_at = now() WHERE job_type = 'test.record'")
    pages = [client.get(path).status_code for path in ("/", "/runs", "/runs?status=running", "/workers")]
    app.config["JOBSWEB_BULK_BATCH"] = 50  # four transactions, each run again whole on a conflict
    response = client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "retry-all",
                                               "job_type": "jobsweb.noop"})
    pages += [response.status_code] + [client.get(path).status_code for path in ("/", "/runs?status=queued")]
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == RUNS + RETRIED,
             message="every run succeeded")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [finish(proc)[0] for proc in workers] == [0, 0, 0]

    assert pages == [200, 200, 200, 200, 302, 200, 200]
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(RUNS, RUNS)]
    assert sorted(r for (r,) in sql("SELECT run_id FROM test_executions")) == ids
    assert sql("SELECT count(*) FROM job_runs WHERE job_type = 'test.record' AND attempts = 1 "
               "AND status = 'succeeded'") == [(RUNS,)]
    assert sql("SELECT count(*) FROM job_attempts WHERE error_type = 'lease_expired'") == [(0,)]
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM job_attempts") == [(RUNS + RETRIED, RUNS + RETRIED)]
    text_of_logs = [log.read_text() for log in logs]
    lines = [line for text in text_of_logs for line in text.splitlines()]
    admin_lines = [r.getMessage() for r in caplog.records]
    assert not [line for line in lines + admin_lines if "unavailable" in line or "available again" in line]
    assert not [line for line in lines if "lease expired" in line]
    conflict_lines = [line for line in lines if "serialization failure (" in line or "deadlock (" in line]
    # The drill does meet conflicts (3 lines in each run so far, one per worker), and logs one
    # line per kind and worker at most: it takes well under a minute.
    assert 1 <= len(conflict_lines) <= 6, conflict_lines
    figures(conflict_lines=len(conflict_lines), admin_conflict_lines=sum("conflict" in m for m in admin_lines))


@pytest.fixture
def updates_conflict(sql, conflict_runs):
    """arm(count, after=0, on=..., table=...): past the next `after` statements `on` the table
    (INSERT or UPDATE of job_runs), the `count` after them fail with a serialization failure (a trigger counting on
    test_conflict_runs, which is not rolled back with them)."""
    sql("CREATE TABLE test_conflict_fails (after integer NOT NULL, fails integer NOT NULL)")
    sql("INSERT INTO test_conflict_fails VALUES (0, 0)")
    sql("""CREATE FUNCTION test_conflict() RETURNS trigger LANGUAGE plpgsql AS $$
           DECLARE n bigint := nextval('test_conflict_runs') - (SELECT after FROM test_conflict_fails);
           BEGIN
               IF n BETWEEN 1 AND (SELECT fails FROM test_conflict_fails) THEN
                   RAISE EXCEPTION 'could not serialize access (a test''s own)' USING ERRCODE = '40001';
               END IF;
               RETURN NULL;
           END $$""")

    tables = {"job_runs"}

    def arm(count, after=0, on="INSERT OR UPDATE", table="job_runs"):
        tables.add(table)
        for name in tables:
            sql(f"DROP TRIGGER IF EXISTS test_conflict ON {name}")
        sql(f"CREATE TRIGGER test_conflict AFTER {on} ON {table} FOR EACH STATEMENT EXECUTE FUNCTION test_conflict()")
        sql("UPDATE test_conflict_fails SET after = %s, fails = %s", [after, count])
        sql("ALTER SEQUENCE test_conflict_runs RESTART")

    yield arm
    for name in tables:
        sql(f"DROP TRIGGER IF EXISTS test_conflict ON {name}")
    sql("DROP FUNCTION test_conflict()")
    sql("DROP TABLE test_conflict_fails")


def test_the_admin_screen_runs_a_transaction_that_met_a_conflict_again_whole(
        app, sql, sign_in, updates_conflict, conflict_runs, clock, caplog):
    caplog.set_level(logging.INFO)
    updates_conflict(0)
    client = sign_in("operator")
    token = csrf_token(client, "/")
    [one] = [r for (r,) in sql("INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', 'dead') RETURNING id")]
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'batch' "
        "FROM generate_series(1, 12)")
    app.config["JOBSWEB_BULK_BATCH"] = 5

    updates_conflict(2)  # a request's one transaction: the view runs again whole
    assert client.post(f"/runs/{one}/retry", data={"csrf_token": token}).status_code == 302
    assert conflict_runs() == 3
    assert sql("SELECT status FROM job_runs WHERE id = %s", [one]) == [("queued",)]

    # A bulk action's second batch (one UPDATE each, no INSERT), after the first committed: that batch
    # again, whole, not the request.
    updates_conflict(1, after=1)
    response = client.post("/runs/bulk", data={"csrf_token": token, "action": "retry-all", "q": "batch"})
    assert response.status_code == 302
    assert conflict_runs() == 4  # three batches and the one that conflicted
    assert sql("SELECT count(*) FROM job_runs WHERE last_error = 'batch' AND status = 'queued'") == [(12,)]
    [(detail,)] = sql("SELECT detail FROM jobsweb_audit_log WHERE action = 'bulk_retry'")
    assert detail["changed"] == 12
    lines = [r.getMessage() for r in caplog.records if r.name == "jobsweb.conflicts"]
    assert len(lines) == 1 and lines[0].startswith("serialization failure (could not serialize access"), lines

    [other] = [r for (r,) in sql("INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', 'dead') "
                                 "RETURNING id")]
    updates_conflict(1000)  # one that never clears: a 503 that says so, not "Database unavailable"
    response = client.post(f"/runs/{other}/retry", data={"csrf_token": token})
    page = response.get_data(as_text=True)
    assert response.status_code == 503 and "Busy" in page and "unavailable" not in page
    assert conflict_runs() == 8
    assert sql("SELECT status FROM job_runs WHERE id = %s", [other]) == [("dead",)]
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]

    # A bulk action whose second batch never clears: the first stays done, and the request is
    # not run again (it committed): 1 + 8 UPDATEs, then the 503.
    updates_conflict(0)
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'stuck' "
        "FROM generate_series(1, 10)")
    updates_conflict(1000, after=1)
    response = client.post("/runs/bulk", data={"csrf_token": token, "action": "retry-all", "q": "stuck"})
    assert response.status_code == 503 and "Busy" in response.get_data(as_text=True)
    assert conflict_runs() == 9
    assert dict(sql("SELECT status, count(*) FROM job_runs WHERE last_error = 'stuck' GROUP BY 1")) == {
        "queued": 5, "dead": 5}


def test_flask_jobs_exec_runs_its_records_again_on_a_conflict(app, sql, spawn_worker, updates_conflict,
                                                              conflict_runs):
    from jobsweb import definitions

    with committed(app):
        definitions.define("backup", None, "0 3 * * *", external=True)

    def exec_backup():
        proc = python_m("flask", ["--app", "wsgi", "jobs", "exec", "backup", "--", sys.executable, "-c",
                                  "print('copied')"], env=spawn_worker.env(), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out == "copied\n", err
        assert "jobsweb:" not in err, err  # no warning: the start recorded before the command, the end after
        assert conflict_runs() >= 3, "the conflicts were met, and the transaction went through after them"

    updates_conflict(2, on="INSERT")  # its start's INSERT of the run, and that transaction's second run
    exec_backup()
    updates_conflict(2, on="UPDATE")  # its end's first UPDATE of the run, and that transaction's second run
    exec_backup()
    assert sql("SELECT r.status, r.attempts, a.outcome FROM job_runs r JOIN job_attempts a ON a.run_id = r.id") == [
        ("succeeded", 1, "succeeded")] * 2


def test_a_worker_s_alert_evaluation_runs_again_on_a_conflict_and_never_reports_an_outage(
        app, sql, updates_conflict, conflict_runs, clock, caplog):
    from jobsweb import enqueue
    from jobsweb.commands import build_worker
    from jobsweb.ops import alerts

    caplog.set_level(logging.INFO)
    with committed(app):
        enqueue("jobsweb.fail", {"permanent": True})
    build_worker(app, concurrency=1, poll_interval=0.05, shutdown_timeout=1).run()  # the run dies
    alerter = alerts.Alerter(app)
    updates_conflict(2, on="INSERT", table="jobsweb_alert_incidents")
    alerter.evaluate_and_send()
    assert conflict_runs() == 3
    assert sql("SELECT count(*) FROM jobsweb_alert_incidents") == [(1,)]
    sql("DELETE FROM jobsweb_alert_deliveries")
    sql("DELETE FROM jobsweb_alert_incidents")
    updates_conflict(1000, on="INSERT", table="jobsweb_alert_incidents")
    alerter.evaluate_and_send()
    assert conflict_runs() == 8
    assert sql("SELECT count(*) FROM jobsweb_alert_incidents") == [(0,)]
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("jobsweb.conflicts") or "alerts" in r.name]
    assert not [line for line in lines if "unavailable" in line], lines
    assert [line.split(": ")[0].split(" (")[0] for line in lines if "conflict" in line or "given up" in line] == [
        "serialization failure", "serialization failure"], lines
