"""The schema's self-check sees what breaks the engine, and `flask jobs migrate` mends it (issue 51,
item 3): a dropped or disabled workflow trigger, a function dropped under a running worker, a
restore with a worker of the old deployment still running. Each on a database of its own
(scratch_database): these tests break its schema."""

import concurrent.futures
import logging
import signal
import subprocess

import psycopg
import pytest

from jobsweb import batch, chain, create_app, enqueue
from jobsweb.commands.worker_commands import build_worker
from jobsweb.core.database import libpq_url
from jobsweb.core.schema_objects import HEAD
from jobsweb.engine.link import Link, SchemaIncomplete
from jobsweb.ops import schema_watch
from tests.conftest import wait_for

SECRET = "0123456789abcdef-test-secret-key-0123456789-x"
CLAIM_IN_ORDER = "jobsweb_claim_runs_in_order(text,double precision,text[],integer,integer,text[])"
TRIGGER = "trigger job_runs_workflow ON job_runs"
DISABLED_REASON = (f"jobsweb's schema at {HEAD} is incomplete, {TRIGGER} disabled: run `flask jobs migrate` "
                   "(it enables the trigger again and moves on the runs it left waiting)")
BREAK = {"dropped": "DROP TRIGGER job_runs_workflow ON job_runs",
         "disabled": "ALTER TABLE job_runs DISABLE TRIGGER job_runs_workflow"}


def app_on(url):
    return create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET})


def run_sql(url, statement, params=None):
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None


def cli(app, *args):
    return app.test_cli_runner().invoke(args=list(args))


def drain(app):
    """One in-process worker's pass (a worker that started before the schema broke: the command's
    check at start is not in it), until nothing is due."""
    build_worker(app, concurrency=4, poll_interval=0.05, shutdown_timeout=1.0).run()


def workflows(app):
    """Chains, after=, after_failure="run" and batches with callbacks, some to fail: the ids of
    the runs to look at, by name."""
    with app.app_context():
        steps = chain([("jobsweb.noop", {})] * 3)
        failing = chain([("jobsweb.fail", {"permanent": True}, {"max_attempts": 1}),
                         ("jobsweb.noop", {}), ("jobsweb.noop", {})])
        cleanup = enqueue("jobsweb.noop", after=[failing.ids[0]], after_failure="run")
        # Waits for a step that ends before the repair and for one that ends after it.
        joined = enqueue("jobsweb.noop", after=[steps.ids[0], steps.ids[2]])
        with batch(on_finish="jobsweb.noop", on_success="jobsweb.noop") as good:
            good.enqueue("jobsweb.noop")
            good.enqueue("jobsweb.noop")
        with batch(on_finish="jobsweb.noop", on_success="jobsweb.noop") as bad:
            bad.enqueue("jobsweb.fail", {"permanent": True}, max_attempts=1)
            bad.enqueue("jobsweb.noop")
    return {"steps": steps.ids, "failing": failing.ids, "cleanup": cleanup, "joined": joined,
            "good": (good.callbacks["on_finish"], good.callbacks["on_success"]),
            "bad": (bad.callbacks["on_finish"], bad.callbacks["on_success"])}


def status(url, *ids):
    rows = dict(run_sql(url, "SELECT id, status FROM job_runs WHERE id = ANY(%s)", [list(ids)]))
    return [rows[run_id] for run_id in ids]


def outcome(url):
    """Every run and batch as the workflow left them (times and workers aside)."""
    return (run_sql(url, "SELECT id, job_type, status, reason, waiting_for, attempts, batch_callback FROM job_runs "
                         "ORDER BY id"),
            run_sql(url, "SELECT id, members, pending, failures, finishes, finished_at IS NOT NULL FROM job_batches "
                         "ORDER BY id"))


@pytest.mark.parametrize("how", ["dropped", "disabled"])
def test_migrate_moves_on_what_a_dropped_or_disabled_trigger_left_waiting_as_the_trigger_would_have(
        scratch_database, how):
    reference = scratch_database("jobsweb_repair_reference")
    ran = workflows(app_on(reference))
    drain(app_on(reference))

    url = scratch_database(f"jobsweb_repair_{how}")
    app = app_on(url)
    run_sql(url, BREAK[how])
    assert workflows(app) == ran  # the same ids
    drain(app)
    # What ended meanwhile moved nothing on.
    assert status(url, *ran["steps"], *ran["failing"], ran["cleanup"], ran["joined"], *ran["good"], *ran["bad"]) == [
        "succeeded", "waiting", "waiting", "dead", "waiting", "waiting", "waiting", "waiting"] + ["waiting"] * 4
    health = app.test_client().get("/healthz")
    assert health.status_code == 503
    if how == "disabled":
        assert health.get_json()["reason"] == "schema"  # the words, DISABLED_REASON, only in the log
        refused = cli(app, "run-jobs")
        assert (refused.exit_code, refused.output) == (1, f"Error: {DISABLED_REASON}\n")

    migrated = cli(app, "jobs", "migrate")
    assert migrated.exit_code == 0, migrated.output
    assert migrated.output.splitlines() == [
        f"jobsweb's schema: recreated {TRIGGER}" if how == "dropped" else
        f"jobsweb's schema: enabled {TRIGGER} (it was disabled)",
        # Step 2, the clean-up and three callbacks queued; the failed chain's steps 2 and 3 and
        # the failed batch's on_success cancelled. `joined` waits for step 3 alone now.
        "jobsweb's schema: moved on 8 run(s) the workflow trigger had left waiting: 5 released to the queue, "
        "3 cancelled",
        f"jobsweb's schema is up to date ({HEAD})"]
    assert run_sql(url, "SELECT waiting_for FROM job_runs WHERE id = %s", [ran["joined"]]) == [(1,)]
    assert run_sql(url, "SELECT tgenabled FROM pg_trigger WHERE tgname = 'job_runs_workflow'") == [("O",)]
    assert app.test_client().get("/healthz").status_code == 200
    assert cli(app, "jobs", "migrate").output == f"jobsweb's schema is up to date ({HEAD})\n"  # nothing more

    drain(app)
    assert outcome(url) == outcome(reference)
    assert status(url, *ran["steps"], ran["joined"]) == ["succeeded"] * 4


def test_migrate_moves_nothing_on_where_the_trigger_did_its_work(scratch_database):
    url = scratch_database("jobsweb_repair_nothing")
    app = app_on(url)
    ran = workflows(app)
    with app.app_context():
        after_failed = enqueue("jobsweb.noop", after=[ran["failing"][0]])
    drain(app)
    before = outcome(url)
    assert status(url, after_failed, ran["joined"]) == ["cancelled", "succeeded"]
    assert cli(app, "jobs", "migrate").output == f"jobsweb's schema is up to date ({HEAD})\n"
    assert outcome(url) == before


def test_what_ends_while_migrate_moves_runs_on_is_counted_once_and_a_trigger_enabled_by_hand_is_no_excuse(
        scratch_database):
    url = scratch_database("jobsweb_repair_race")
    app = app_on(url)
    run_sql(url, BREAK["disabled"])
    with app.app_context():
        first, second = enqueue("jobsweb.noop"), enqueue("jobsweb.noop")
        both = enqueue("jobsweb.noop", after=[first, second])
    run_sql(url, "UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE id = %s", [first])
    run_sql(url, "ALTER TABLE job_runs ENABLE TRIGGER job_runs_workflow")  # by hand: migrate sees no trigger to mend
    with psycopg.connect(libpq_url(url)) as ending:  # the second run ends, counted down, not yet committed
        ending.execute("UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE id = %s", [second])
        assert run_sql(url, "SELECT status, waiting_for FROM job_runs WHERE id = %s", [both]) == [("waiting", 2)]
        migrating = concurrent.futures.ThreadPoolExecutor(1).submit(cli, app, "jobs", "migrate")
        # It waits for that transaction to end before it counts (else it read `second` running and
        # wrote its count over the trigger's: `both` waiting for ever, for one run).
        wait_for(lambda: run_sql(url, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                                      "AND wait_event_type = 'Lock'"), message="migrate to wait for the end")
    migrated = migrating.result(timeout=60)
    assert migrated.output.splitlines()[0] == (
        "jobsweb's schema: moved on 1 run(s) the workflow trigger had left waiting: 1 released to the queue, 0 cancelled")
    assert run_sql(url, "SELECT status, waiting_for FROM job_runs WHERE id = %s", [both]) == [("queued", 0)]


def test_a_schema_error_on_the_workers_link_is_a_schema_outage_and_leaves_the_connection_usable(scratch_database):
    url = scratch_database("jobsweb_link_schema")
    link = Link(libpq_url(url))
    try:
        assert link.fetch("SELECT 1") == [(1,)]
        conn = link.conn
        run_sql(url, f"DROP FUNCTION {CLAIM_IN_ORDER}")
        with pytest.raises(SchemaIncomplete, match=r"^jobsweb's schema lacks what a statement needs \(function "
                                                   r"jobsweb_claim_runs_in_order\(.*\) does not exist\): run "
                                                   r"`flask jobs migrate`$"):
            link.fetch("SELECT * FROM jobsweb_claim_runs_in_order('w', 1, '{}', 1, 1, NULL)")
        with pytest.raises(SchemaIncomplete, match="relation \"job_nothing\" does not exist"):
            link.fetch_together([("SELECT 1", None), ("SELECT * FROM job_nothing", None)])
        assert link.fetch("SELECT 2") == [(2,)] and link.conn is conn
    finally:
        link.close()


def test_a_running_workers_look_says_a_disabled_trigger_once_and_once_that_the_schema_is_whole_again(
        scratch_database, caplog):
    url = scratch_database("jobsweb_schema_watch")
    app = app_on(url)
    look = schema_watch.duty(app.config)
    assert look.every == 20.0  # as often as it heartbeats: "within a minute"
    assert "schema watch" in [duty.name for duty in build_worker(app, concurrency=1, poll_interval=1,
                                                                  shutdown_timeout=1).duties]
    caplog.set_level(logging.INFO, logger="jobsweb.worker")
    link = Link(libpq_url(url))
    try:
        assert look.run(link) is False
        run_sql(url, BREAK["disabled"])
        assert [look.run(link) for _ in range(3)] == [False] * 3
        run_sql(url, "ALTER TABLE job_runs ENABLE TRIGGER job_runs_workflow")
        look.run(link)
        look.run(link)
    finally:
        link.close()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"{DISABLED_REASON}; this worker keeps running"),
        ("INFO", "jobsweb's schema is whole again")]


def worker_lines(proc):
    with open(proc.output.name) as log:
        return log.read().splitlines()


def said(proc, text, timeout=60):
    """The worker's lines that hold `text`, once there is one; it must not have exited meanwhile."""
    def lines():
        found = [line for line in worker_lines(proc) if text in line]
        assert found or proc.poll() is None, "the worker exited:\n" + "\n".join(worker_lines(proc))
        return found

    return wait_for(lines, timeout=timeout, message=f"the worker to say {text!r}")


def registered(url):
    return wait_for(lambda: run_sql(url, "SELECT id FROM job_workers WHERE stopped_at IS NULL"),
                    message="the worker to register")


def stopped_cleanly(proc):
    assert proc.poll() is None, "\n".join(worker_lines(proc))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    lines = worker_lines(proc)
    assert not [line for line in lines if "Traceback" in line], "\n".join(lines)
    return lines


# A worker that checks the schema (and heartbeats) every second, polling often.
QUICK_WORKER = {"JOBSWEB_LEASE_SECONDS": "3"}


def test_a_worker_running_while_the_claim_function_is_dropped_keeps_running_says_so_and_claims_after_migrate(
        scratch_database, spawn_worker, tmp_path):
    url = scratch_database("jobsweb_claim_dropped")
    app = app_on(url)
    with open(tmp_path / "worker.log", "w") as output:
        proc = spawn_worker("--forever", "--poll-interval", "0.2", output=output, DATABASE_URL=libpq_url(url),
                            **QUICK_WORKER)
    registered(url)
    run_sql(url, f"DROP FUNCTION {CLAIM_IN_ORDER}")
    with app.app_context():
        run_id = enqueue("jobsweb.noop")
    said(proc, "jobsweb's schema lacks what a statement needs (function jobsweb_claim_runs_in_order(")
    said(proc, f"jobsweb's schema at {HEAD} is incomplete, missing function {CLAIM_IN_ORDER}: run `flask jobs migrate`")
    assert proc.poll() is None and status(url, run_id) == ["queued"]

    migrated = cli(app, "jobs", "migrate")
    assert migrated.output.splitlines()[0] == f"jobsweb's schema: recreated function {CLAIM_IN_ORDER}"
    wait_for(lambda: status(url, run_id) == ["succeeded"], message="the run to succeed after migrate")
    said(proc, "jobsweb's schema is whole again")
    lines = stopped_cleanly(proc)
    assert len([line for line in lines if "is incomplete" in line]) == 1, "\n".join(lines)  # the look's one line


def test_a_restore_with_a_worker_of_the_old_deployment_running_strands_nothing_once_migrated(
        scratch_database, postgres_server, spawn_worker, tmp_path):
    admin, _ = postgres_server
    with psycopg.connect(admin) as conn:
        [bindir] = conn.execute("SELECT setting FROM pg_config WHERE name = 'BINDIR'").fetchone()
    url = scratch_database("jobsweb_restored_under_worker")
    app = app_on(url)
    run_sql(url, "INSERT INTO job_paused_types (job_type) VALUES ('jobsweb.noop')")  # nothing runs before the dump
    with app.app_context():
        steps = chain([("jobsweb.noop", {})] * 3)
        with batch(on_finish="jobsweb.noop") as members:
            members.enqueue("jobsweb.noop")
            members.enqueue("jobsweb.noop")
    callback = members.callbacks["on_finish"]
    with open(tmp_path / "worker.log", "w") as output:
        proc = spawn_worker("--forever", "--poll-interval", "0.2", output=output, DATABASE_URL=libpq_url(url),
                            **QUICK_WORKER)
    registered(url)

    # DEPLOY.md's backup of jobsweb's tables, and its restore over them without the trigger,
    # while the worker runs; `flask jobs migrate` comes later.
    dump, listed = tmp_path / "jobsweb-tables.dump", tmp_path / "jobsweb-tables.list"
    subprocess.run([f"{bindir}/pg_dump", "--format=custom", "--table=job_*", "--table=jobsweb_*",
                    f"--file={dump}", libpq_url(url)], check=True)
    contents = subprocess.run([f"{bindir}/pg_restore", "--list", str(dump)], check=True, capture_output=True,
                              text=True).stdout
    listed.write_text("".join(line + "\n" for line in contents.splitlines() if " TRIGGER " not in line))
    subprocess.run([f"{bindir}/pg_restore", "--clean", "--if-exists", f"--use-list={listed}",
                    f"--dbname={libpq_url(url)}", str(dump)], check=True)
    run_sql(url, "DELETE FROM job_paused_types")

    members_ids = [row[0] for row in run_sql(url, "SELECT id FROM job_runs WHERE batch_id IS NOT NULL "
                                                  "AND batch_callback IS NULL ORDER BY id")]
    wait_for(lambda: status(url, steps.ids[0], *members_ids) == ["succeeded"] * 3,
             message="the old worker to run what it could")
    said(proc, f"jobsweb's schema at {HEAD} is incomplete, missing {TRIGGER}")
    assert status(url, *steps.ids[1:], callback) == ["waiting"] * 3  # stranded

    migrated = cli(app, "jobs", "migrate")
    assert migrated.exit_code == 0, migrated.output
    assert migrated.output.splitlines() == [
        f"jobsweb's schema: recreated {TRIGGER}",
        "jobsweb's schema: moved on 2 run(s) the workflow trigger had left waiting: 2 released to the queue, "
        "0 cancelled",
        f"jobsweb's schema is up to date ({HEAD})"]
    wait_for(lambda: status(url, *steps.ids, callback) == ["succeeded"] * 4,
             message="the chain and the callback to finish after migrate")
    said(proc, "jobsweb's schema is whole again")
    stopped_cleanly(proc)
