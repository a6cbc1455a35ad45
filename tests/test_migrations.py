"""Migrations go down as well as up: the latest one's downgrade gives back the schema before it."""

import psycopg
import pytest
from flask_migrate import downgrade, upgrade

from jobsweb import create_app
from jobsweb.core.database import libpq_url

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


def claim_function(url, function=CLAIM_FUNCTION):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute("SELECT pg_get_functiondef(to_regprocedure(%s))", [function]).fetchone()[0]


@pytest.mark.parametrize("revision, previous", [("0016_claim_by_id", "0015_claim_path"),
                                                ("0017_claim_fronts", "0016_claim_by_id"),
                                                ("0025_claim_order", "0024_seams")])
def test_a_migration_that_replaces_the_claim_goes_down_to_the_claim_before_it_and_up_again(
        scratch_database, revision, previous):
    before = claim_function(scratch_database("jobsweb_before", revision=previous))
    at_revision = scratch_database("jobsweb_at_revision", revision=revision)
    after = claim_function(at_revision)
    assert after != before

    at(at_revision, downgrade, previous)
    assert claim_function(at_revision) == before
    at(at_revision, upgrade, revision)
    assert claim_function(at_revision) == after


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
