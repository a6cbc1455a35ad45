"""Conflicts are not outages: a transaction PostgreSQL rolled back for a serialization failure
(40001) or a deadlock (40P01) is run again at once, logged as what it is once a minute at most,
and never backs a worker off as for a database that went away (core/conflicts.py). An
operator's action (the CLI, the admin screen, jobsweb.cancel/retry) runs it again with a growing
wait for seconds, then says "conflict with concurrent work, try again"."""

import logging
import re
import signal
import subprocess
import sys
import time

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


def said_runs(page, runs, began):
    """The 503 page names the runs tried and the seconds they took: at least INTERACTIVE (1 s
    here), and no more than the request did (its last wait may end past the 1 s under load)."""
    said = re.search(r"Conflict with concurrent work, try again \(serialization failure at every run: (\d+) over "
                     r"(\d+\.\d) s", page)
    assert said and int(said[1]) == runs and 1.0 <= float(said[2]) <= time.monotonic() - began + 0.05, page


def test_the_admin_screen_runs_a_transaction_that_met_a_conflict_again_whole(
        app, sql, sign_in, updates_conflict, conflict_runs, clock, caplog, monkeypatch):
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
    # One that never clears: run again for INTERACTIVE seconds (not 8 quick tries), then a 503
    # that says so, not "Database unavailable".
    monkeypatch.setattr(conflicts, "INTERACTIVE", 1.0)
    updates_conflict(1000)
    began = time.monotonic()
    response = client.post(f"/runs/{other}/retry", data={"csrf_token": token})
    page = response.get_data(as_text=True)
    assert time.monotonic() - began >= 1.0
    assert response.status_code == 503 and "Busy" in page and "unavailable" not in page
    said_runs(page, conflict_runs(), began)
    assert sql("SELECT status FROM job_runs WHERE id = %s", [other]) == [("dead",)]
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]

    # A bulk action whose second batch never clears: that batch is run again for INTERACTIVE
    # seconds, the first stays done, the request is not run again (it committed), and the page
    # and the audit entry say what was done.
    updates_conflict(0)
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'stuck' "
        "FROM generate_series(1, 10)")
    updates_conflict(1000, after=1)
    began = time.monotonic()
    response = client.post("/runs/bulk", data={"csrf_token": token, "action": "retry-all", "q": "stuck"})
    page = response.get_data(as_text=True)
    assert time.monotonic() - began >= 1.0
    assert response.status_code == 503 and "Busy" in page
    said_runs(page, conflict_runs() - 1, began)
    assert "The batches before it stay done: Retried 5 runs." in page, page
    assert dict(sql("SELECT status, count(*) FROM job_runs WHERE last_error = 'stuck' GROUP BY 1")) == {
        "queued": 5, "dead": 5}
    [(detail,)] = sql("SELECT detail FROM jobsweb_audit_log WHERE action = 'bulk_retry' ORDER BY id DESC LIMIT 1")
    assert detail["changed"] == 5 and detail["stopped"].startswith("conflict with concurrent work")


def test_a_batch_s_and_a_bulk_delete_s_transactions_are_each_run_again_and_a_give_up_says_what_was_done(
        app, sql, sign_in, updates_conflict, conflict_runs, monkeypatch):
    from jobsweb import batch

    client = sign_in("admin")
    token = csrf_token(client, "/")
    app.config["JOBSWEB_BULK_BATCH"] = 7

    def members(count):
        with app.app_context():
            with batch() as made:
                made.enqueue_many("test.record", [{}] * count, run_at=None, queue="held")
        return made.id

    # How many statements on job_runs one transaction of 7 members takes (the workflow
    # trigger's own among them): the second transaction's first one is the one that conflicts.
    first = members(7)
    updates_conflict(0)
    assert client.post(f"/batches/{first}/cancel", data={"csrf_token": token}).status_code == 302
    per_transaction = conflict_runs()
    second = members(14)
    updates_conflict(2, after=per_transaction)  # the second transaction's first two runs
    response = client.post(f"/batches/{second}/cancel", data={"csrf_token": token})
    assert response.status_code == 302, response.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_runs WHERE batch_id = %s AND status = 'cancelled'", [second]) == [(14,)]

    # A bulk delete whose second batch never clears: the first stays deleted, audited, and said.
    monkeypatch.setattr(conflicts, "INTERACTIVE", 1.0)
    updates_conflict(0)
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'old' "
        "FROM generate_series(1, 10)")
    app.config["JOBSWEB_BULK_BATCH"] = 5
    updates_conflict(1000, on="DELETE", after=1)
    response = client.post("/runs/delete", data={"csrf_token": token, "action": "delete-all", "q": "old",
                                                 "confirmed": "yes"})
    page = response.get_data(as_text=True)
    assert response.status_code == 503 and "Conflict with concurrent work, try again" in page, page
    assert "5 runs were deleted before it." in page, page
    assert sql("SELECT count(*) FROM job_runs WHERE last_error = 'old'") == [(5,)]
    assert sql("SELECT detail->>'deleted' FROM jobsweb_audit_log WHERE action = 'bulk_delete'") == [("5",)]

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


# -- an operator's actions: run again for seconds, then "conflict with concurrent work" --------


class _Conflict(Exception):
    sqlstate = "40001"  # what psycopg's SerializationFailure carries


@pytest.fixture
def fake_time(monkeypatch, clock):
    """conflicts' own clock and sleep, moved by hand: (now, the waits slept)."""
    now, waits = [0.0], []

    def sleep(seconds):
        waits.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(conflicts, "clock", lambda: now[0])
    monkeypatch.setattr(conflicts, "sleep", sleep)
    return now, waits


def test_an_operator_s_action_backs_off_with_jitter_for_seconds_while_the_worker_s_tries_8_times_at_once(
        fake_time, caplog):
    now, waits = fake_time
    runs = []

    def conflicting():
        runs.append(now[0])
        raise _Conflict("could not serialize access due to concurrent update")

    with pytest.raises(conflicts.Conflict) as raised:
        conflicts.retried(conflicting, patience=conflicts.INTERACTIVE)
    assert str(raised.value).startswith(f"conflict with concurrent work, try again (serialization failure at every "
                                        f"run: {len(runs)} over 5.0 s; could not serialize access")
    assert runs[-1] == pytest.approx(5.0) and sum(waits) == pytest.approx(5.0)  # its last run at the bound
    ceilings = [min(0.5, 0.01 * 2 ** n) for n in range(len(waits) - 1)]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings)), waits  # growing, capped at 0.5 s
    assert len({w / c for w, c in zip(waits, ceilings)}) == len(ceilings)  # jittered: no two alike
    assert 14 <= len(runs) <= 22, runs  # about 18 runs, against the worker's 8 in 0.14 s at most
    assert isinstance(raised.value.__cause__, _Conflict) and conflicts.kind(raised.value) == "40001"

    # Given up, it is never run again by an enclosing retried() (a request around a bulk batch).
    runs.clear()
    with pytest.raises(conflicts.Conflict):
        conflicts.retried(lambda: conflicts.retried(conflicting, patience=1.0), patience=conflicts.INTERACTIVE)
    assert now[0] == pytest.approx(6.0)

    # The worker's Link: 8 runs within a few ms each, then the conflict itself (its Conflicted).
    waits.clear()
    runs.clear()
    with pytest.raises(_Conflict):
        conflicts.retried(conflicting)
    assert len(runs) == conflicts.TRIES == 8 and sum(waits) <= 0.005 * 28


def test_cancel_and_retry_from_code_run_again_on_a_conflict_and_give_up_in_words(
        app, sql, updates_conflict, conflict_runs, monkeypatch):
    import jobsweb

    updates_conflict(0)
    [queued, dead, stuck] = [r for (r,) in sql(
        "INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', 'queued'), ('jobsweb.noop', 'dead'), "
        "('jobsweb.noop', 'queued') RETURNING id")]
    with app.app_context():
        updates_conflict(2)  # its transaction's first two runs fail; the third goes through
        assert jobsweb.cancel(queued) == "cancelled"
        assert conflict_runs() >= 3
        updates_conflict(2)
        jobsweb.retry(dead)
        assert conflict_runs() >= 3
        assert dict(sql("SELECT id, status FROM job_runs")) == {queued: "cancelled", dead: "queued", stuck: "queued"}

        monkeypatch.setattr(conflicts, "INTERACTIVE", 1.0)
        updates_conflict(1000)  # never clears: given up after a second, in words, nothing changed
        began = time.monotonic()
        with pytest.raises(conflicts.Conflict) as raised:
            jobsweb.cancel(stuck)
        assert time.monotonic() - began >= 1.0
        assert str(raised.value).startswith("conflict with concurrent work, try again (serialization failure at "
                                            f"every run: {conflict_runs()} over 1.")
    assert sql("SELECT status FROM job_runs WHERE id = %s", [stuck]) == [("queued",)]
    assert sql("SELECT action FROM jobsweb_audit_log ORDER BY id") == [("cancel",), ("retry",)]


def test_the_cli_says_conflict_with_concurrent_work_never_cannot_reach_the_database(
        app, runner, sql, updates_conflict, conflict_runs, monkeypatch):
    monkeypatch.setattr(conflicts, "INTERACTIVE", 1.0)
    updates_conflict(0)
    [first, second] = [r for (r,) in sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop'), ('jobsweb.noop') "
                                         "RETURNING id")]
    updates_conflict(1000)
    result = runner.invoke(args=["jobs", "runs", "cancel", str(first), str(second)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: run {first}: not changed: conflict with concurrent work, try again "
                                    "(serialization failure at every run: "), result.output
    assert result.output.rstrip().endswith("; the 1 run after it were not tried"), result.output
    assert "cannot reach" not in result.output and "DATABASE_URL" not in result.output

    # Every run a filter matches, in batches: the first batch's cancel stays done, the second never
    # clears, and the audit entry and the error say so.
    updates_conflict(0)
    sql("INSERT INTO job_runs (job_type, queue) SELECT 'jobsweb.noop', 'bulk' FROM generate_series(1, 10)")
    app.config["JOBSWEB_BULK_BATCH"] = 5
    updates_conflict(1000, after=2)  # a cancel's two UPDATEs (the queued runs, the running ones) per batch
    result = runner.invoke(args=["jobs", "runs", "cancel", "--queue", "bulk"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: conflict with concurrent work, try again (serialization failure"), \
        result.output
    assert result.output.rstrip().endswith("; 5 of the runs that match were changed by the batches before it, the "
                                           "rest were not"), result.output
    assert dict(sql("SELECT status, count(*) FROM job_runs WHERE queue = 'bulk' GROUP BY 1")) == {
        "cancelled": 5, "queued": 5}
    [(detail,)] = sql("SELECT detail FROM jobsweb_audit_log WHERE action = 'bulk_cancel'")
    assert detail["changed"] == 5 and detail["stopped"].startswith("conflict with concurrent work")
    assert sql("SELECT status FROM job_runs WHERE id IN (%s, %s)", [first, second]) == [("queued",)] * 2

    # A conflict that reaches a command not run again (a read, the worker's Link): the same words.
    from click import ClickException
    from sqlalchemy import text

    from jobsweb.commands.groups import plain_errors
    from jobsweb.core.database import db

    with app.app_context(), pytest.raises(ClickException) as raised:
        with plain_errors():
            db.session.execute(text(FAILING.format(fails=1000, state="40P01")))
    assert raised.value.message.startswith("conflict with concurrent work, try again (deadlock: "), raised.value.message


DRAINED = 1500  # runs the three workers drain meanwhile
TARGETS = 40  # runs each cancel names (the drill: `flask jobs runs cancel <40 ids>`)


def test_under_serializable_bulk_cancels_of_40_runs_beside_3_draining_workers_succeed(
        serializable, app, sql, runner, spawn_worker, monkeypatch, tmp_path, figures):
    import jobsweb

    met = []  # the conflicts this process's cancels met, each run again
    note = conflicts.tally.note
    monkeypatch.setattr(conflicts.tally, "note", lambda state, exc, **kw: met.append(kw) or note(state, exc, **kw))
    insert = ("INSERT INTO job_runs (job_type, payload, queue, run_at) SELECT %s, %s::jsonb, %s, "
              "now() + interval '1 hour' FROM generate_series(1, %s)")
    sql(insert, ["test.record", "{}", "default", DRAINED])
    # Runs that never end before their cancel (a running one is asked to stop), spread through
    # the drain's claim order: claimed, heartbeated and finished among the others.
    for name in ("cli", "filter", "code"):
        sql(insert, ["jobsweb.sleep", '{"seconds": 60}', name, TARGETS])
    workers = [spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "8",
                            output=open(tmp_path / f"worker-{n}.log", "w+"), JOBSWEB_LEASE_SECONDS=2)
               for n in range(3)]
    wait_for(lambda: sql("SELECT count(*) FROM job_workers")[0][0] == 3, message="three workers registered")
    sql("UPDATE job_runs SET run_at = now() - random() * interval '1 second'")  # the targets among the rest
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] >= 100,
             message="the drain under way")

    cli = [r for (r,) in sql("SELECT id FROM job_runs WHERE queue = 'cli' ORDER BY id")]
    by_ids = runner.invoke(args=["jobs", "runs", "cancel", *map(str, cli)])
    by_filter = runner.invoke(args=["jobs", "runs", "cancel", "--queue", "filter"])
    with app.app_context():
        from_code = [jobsweb.cancel(run) for (run,) in sql("SELECT id FROM job_runs WHERE queue = 'code'")]
    drained_by_then = sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0]

    assert (by_ids.exit_code, by_filter.exit_code) == (0, 0), by_ids.output + by_filter.output
    assert "cannot reach" not in by_ids.output + by_filter.output
    assert len(by_ids.output.splitlines()) == TARGETS
    assert set(from_code) <= {"cancelled", "stop_requested"} and len(from_code) == TARGETS
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE job_type = 'jobsweb.sleep' AND status = 'cancelled'"
                         )[0][0] == 3 * TARGETS, message="every target cancelled")
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == DRAINED,
             message="the drain done")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [finish(proc)[0] for proc in workers] == [0, 0, 0]
    figures(conflicts_met=len(met), given_up=sum(kw.get("given_up") is not None for kw in met),
            drained_by_then=drained_by_then, stop_requested=from_code.count("stop_requested"))
    assert not [kw for kw in met if kw.get("given_up") is not None]
