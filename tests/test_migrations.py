"""Migrations go down as well as up: the latest one's downgrade gives back the schema before it."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from flask_migrate import downgrade, upgrade

from jobsweb import create_app
from jobsweb.core.database import libpq_url
from jobsweb.core.schema import revisions

from .test_schema_names import shape

PREVIOUS = "0014_payload_search"
CLAIM_FUNCTION = "jobsweb_claim_runs(text, double precision, text[], integer, integer, text[])"


def at(url, step, revision):
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True,
                      "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    with app.app_context():
        step(revision=revision)


def has_claim_function(url):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", [CLAIM_FUNCTION]).fetchone()[0]


def test_0015_goes_down_to_the_schema_of_0014_and_up_again_to_the_schema_of_a_new_install(scratch_database):
    before = shape(scratch_database("jobsweb_at_0014", revision=PREVIOUS))
    head = scratch_database("jobsweb_at_head")
    after = shape(head)
    assert after != before and has_claim_function(head)

    at(head, downgrade, PREVIOUS)
    assert shape(head) == before and not has_claim_function(head)
    at(head, upgrade, "head")
    assert shape(head) == after and has_claim_function(head)


def test_0031_goes_down_to_the_slot_constraint_of_0030_and_up_again_and_both_refuse_a_second_run_of_a_slot(
        scratch_database):
    before = shape(scratch_database("jobsweb_at_0030", revision="0030_deploy_marks"))
    url = scratch_database("jobsweb_at_0031", revision="0031_definition_slot_partial")
    after = shape(url)
    assert after != before

    at(url, downgrade, "0030_deploy_marks")
    assert shape(url) == before
    assert second_run_of_a_slot(url) == "UniqueViolation"
    at(url, upgrade, "0031_definition_slot_partial")
    assert shape(url) == after
    assert second_run_of_a_slot(url) == "UniqueViolation"


def second_run_of_a_slot(url):
    """The error class of inserting a run for a definition's slot that has one already."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("TRUNCATE job_definitions, job_runs CASCADE")
        conn.execute("INSERT INTO job_definitions (name, job_type, schedule) VALUES ('d', 'jobsweb.noop', '@hourly')")
        slot = "INSERT INTO job_runs (definition_id, job_type, scheduled_for) SELECT id, 'jobsweb.noop', " \
               "'2026-11-28 10:00+00' FROM job_definitions"
        conn.execute(slot)
        try:
            conn.execute(slot)
        except psycopg.Error as exc:
            return type(exc).__name__
        return None


def claim_function(url, function=CLAIM_FUNCTION):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute("SELECT pg_get_functiondef(to_regprocedure(%s))", [function]).fetchone()[0]


@pytest.mark.parametrize("revision, previous, function", [
    ("0016_claim_by_id", "0015_claim_path", CLAIM_FUNCTION),
    ("0017_claim_fronts", "0016_claim_by_id", CLAIM_FUNCTION),
    ("0025_claim_order", "0024_seams", CLAIM_FUNCTION),
    # The worker's claim since 0025, which 0032 replaces (jobsweb_claim_runs calls it, unchanged).
    ("0032_unbegun_claims", "0031_definition_slot_partial", CLAIM_FUNCTION.replace("(", "_in_order(", 1))])
def test_a_migration_that_replaces_the_claim_goes_down_to_the_claim_before_it_and_up_again(
        scratch_database, revision, previous, function):
    before = claim_function(scratch_database("jobsweb_before", revision=previous), function)
    at_revision = scratch_database("jobsweb_at_revision", revision=revision)
    after = claim_function(at_revision, function)
    assert after != before

    at(at_revision, downgrade, previous)
    assert claim_function(at_revision, function) == before
    at(at_revision, upgrade, revision)
    assert claim_function(at_revision, function) == after


def test_the_claim_at_head_sets_no_planner_cost_and_is_never_jit_compiled(scratch_database):
    # The worker's claim since 0025 (jobsweb_claim_runs is a plain SQL call of it, for old workers).
    head = claim_function(scratch_database("jobsweb_at_head"), CLAIM_FUNCTION.replace("(", "_in_order(", 1))
    assert "enable_" not in head
    assert "SET jit TO 'off'" in head and "SET plan_cache_mode TO 'force_custom_plan'" in head


def test_after_0025_a_worker_of_the_previous_release_still_claims_with_its_ten_columns_in_priority_order(
        scratch_database):
    # A rolling deploy: `flask jobs migrate` runs while the previous release's workers still call
    # jobsweb_claim_runs and unpack ten columns (0025 returns two more from a new function).
    url = scratch_database("jobsweb_rolling", revision="head")
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("INSERT INTO job_runs (job_type, priority, run_at) VALUES "
                     "('jobsweb.noop', 5, now() - interval '2 minutes'), ('jobsweb.noop', 0, now() - interval '1 minute')")
        rows = conn.execute("SELECT * FROM jobsweb_claim_runs('old-release', 60, ARRAY['jobsweb.noop'], 2, 2, NULL)").fetchall()
    assert [len(row) for row in rows] == [10, 10]
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)[::-1]  # priority 0 (made second) first


# -- the schema knows when it is incomplete (jobsweb/core/schema_objects.py) ------------------

SECRET = "0123456789abcdef-test-secret-key-0123456789-x"
CATALOG = """
SELECT 'table', c.relname::text FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relname ~ '^jobs?(web)?_'
UNION ALL
SELECT 'index', c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
WHERE c.relnamespace = current_schema()::regnamespace AND t.relname ~ '^jobs?(web)?_'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint con WHERE con.conindid = i.indexrelid AND con.conrelid = i.indrelid)
UNION ALL
SELECT 'function', p.oid::regprocedure::text FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname ~ '^jobsweb_'
UNION ALL
SELECT 'trigger', t.tgname || ' ON ' || t.tgrelid::regclass FROM pg_trigger t WHERE NOT t.tgisinternal
"""
DEFINITIONS = """
SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname ~ '^jobsweb_'
UNION ALL
SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal
"""
CLAIM_IN_ORDER = "jobsweb_claim_runs_in_order(text,double precision,text[],integer,integer,text[])"


def catalog(url, query=CATALOG):
    with psycopg.connect(libpq_url(url)) as conn:
        return sorted(conn.execute(query).fetchall())


def cli(url, *args):
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET})
    return app.test_cli_runner().invoke(args=list(args))


def statuses(url):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute("SELECT job_type, status FROM job_runs ORDER BY id").fetchall()


def test_the_schema_lists_are_what_a_fresh_migrate_makes_at_the_head(scratch_database):
    from jobsweb.core import schema_objects as listed

    assert revisions()[0] == {listed.HEAD}, "a new migration: say in schema_objects.py what it adds, drops or replaces"
    made = catalog(scratch_database("jobsweb_fresh"))
    assert made == sorted([("table", name) for name in listed.TABLES] + [("index", name) for name in listed.INDEXES]
                          + [("function", name) for name in listed.FUNCTIONS]
                          + [("trigger", name) for name in listed.TRIGGERS])
    assert (len(listed.TABLES), len(listed.INDEXES), len(listed.FUNCTIONS), len(listed.TRIGGERS)) == (21, 40, 7, 1)


def test_migrate_recreates_the_dropped_functions_and_trigger_as_the_migrations_made_them_and_a_run_succeeds(
        scratch_database):
    url = scratch_database("jobsweb_functions_dropped")
    before = catalog(url, DEFINITIONS)
    with psycopg.connect(libpq_url(url)) as conn:
        for (name, _) in before:
            if name.startswith("jobsweb_"):
                conn.execute(f"DROP FUNCTION IF EXISTS {name} CASCADE")  # the trigger goes with its function
    assert catalog(url, DEFINITIONS) == []

    refused = cli(url, "run-jobs")
    assert refused.exit_code == 1
    [line] = refused.output.splitlines()
    assert line.startswith("Error: jobsweb's schema at 0034_worker_stop is incomplete, missing function "
                           f"{CLAIM_IN_ORDER}, function jobsweb_claim_runs(")
    assert "trigger job_runs_workflow ON job_runs: run `flask jobs migrate`" in line

    migrated = cli(url, "jobs", "migrate")
    assert migrated.exit_code == 0, migrated.output
    assert migrated.output.splitlines() == [
        f"jobsweb's schema: recreated function {CLAIM_IN_ORDER}, "
        "function jobsweb_claim_runs(text,double precision,text[],integer,integer,text[]), "
        "function jobsweb_count_down(bigint[],boolean), function jobsweb_batch_ended(bigint,integer,integer), "
        "function jobsweb_cancel_below(bigint,text), function jobsweb_revive_below(bigint,text), "
        "function jobsweb_workflow_step(), trigger job_runs_workflow ON job_runs",
        "jobsweb's schema is up to date (0034_worker_stop)"]
    assert catalog(url, DEFINITIONS) == before
    assert cli(url, "jobs", "migrate").output == "jobsweb's schema is up to date (0034_worker_stop)\n"

    assert cli(url, "jobs", "enqueue", "jobsweb.noop").exit_code == 0
    ticked = cli(url, "run-jobs")
    assert ticked.exit_code == 0, ticked.output
    assert statuses(url) == [("jobsweb.noop", "succeeded")]


def test_migrate_stops_naming_a_missing_index_it_cannot_recreate(scratch_database):
    url = scratch_database("jobsweb_index_dropped")
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("DROP INDEX job_runs_claimable")
    migrated = cli(url, "jobs", "migrate")
    assert migrated.exit_code == 1
    assert migrated.output.splitlines() == [
        "Error: jobsweb's schema at 0034_worker_stop is incomplete, missing index job_runs_claimable: run "
        "`flask jobs migrate` (it recreates functions and triggers; tables and indexes come back with a "
        "restore of jobsweb's tables)"]


def deploy_recipe(block_id, url, directory, bindir):
    """Run DEPLOY.md's block `block_id` as a reader would, with DATABASE_URL `url` and the
    server's own pg_dump and pg_restore; its output."""
    from tests.docs.snippets import Document, commands

    [block] = [block for block in Document("docs/DEPLOY.md").blocks if block.id == block_id]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JOBSWEB_", "PYTHON"))}
    env.update(PATH=f"{bindir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               FLASK_APP="jobsweb", DATABASE_URL=libpq_url(url), SECRET_KEY=SECRET)
    output = []
    for command in commands(block.text):
        done = subprocess.run(["bash", "-c", command], cwd=directory, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}"
        output.append(done.stdout)
    return "".join(output)


def test_deploy_md_backup_of_jobsweb_tables_restored_into_an_empty_database_runs_its_runs(
        scratch_database, postgres_server, tmp_path):
    admin, _ = postgres_server
    with psycopg.connect(admin) as conn:
        [bindir] = conn.execute("SELECT setting FROM pg_config WHERE name = 'BINDIR'").fetchone()
    source = scratch_database("jobsweb_backed_up")
    assert cli(source, "jobs", "enqueue", "jobsweb.noop").exit_code == 0  # a run in the dump
    deploy_recipe("backup", source, tmp_path, bindir)

    empty = scratch_database("jobsweb_restored", revision=None)
    restored = deploy_recipe("restore", empty, tmp_path, bindir)
    said = [line for line in restored.splitlines() if line.startswith("jobsweb's schema")]  # not Alembic's log
    assert said[0].startswith(f"jobsweb's schema: recreated function {CLAIM_IN_ORDER}, ")
    assert said[0].endswith(", trigger job_runs_workflow ON job_runs")
    assert said[1:] == ["jobsweb's schema is up to date (0034_worker_stop)"]
    assert catalog(empty) == catalog(source)

    assert cli(empty, "jobs", "enqueue", "jobsweb.sleep", "--payload", '{"seconds": 0}').exit_code == 0
    ticked = cli(empty, "run-jobs")
    assert ticked.exit_code == 0, ticked.output
    assert statuses(empty) == [("jobsweb.noop", "succeeded"), ("jobsweb.sleep", "succeeded")]
