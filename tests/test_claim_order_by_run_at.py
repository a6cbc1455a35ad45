"""The claim takes due runs oldest run_at first, whatever order they were created in (issue 35):
a run enqueued later for an earlier time (a retry, a run_at in the past, a materialised slot
that was late) is not overtaken by runs created before it."""

from jobsweb.engine import statements


def claim(sql, limit, free):
    """Run ids a claim of up to `limit` runs takes, `free` of them for free slots, in claim order."""
    return [row[0] for row in sql(statements.CLAIM_RUNS, {
        "worker": "test", "lease": 60, "job_types": ["jobsweb.noop"], "limit": limit, "free": free,
        "queues": None})]


def created_newest_first_due(sql, runs, max_attempts=5):
    """`runs` due runs, each created later but due earlier than the one before: ids 1..runs,
    run 1 due a minute ago, run `runs` due `runs` minutes ago."""
    return [row[0] for row in sql(
        "INSERT INTO job_runs (job_type, run_at, max_attempts) "
        "SELECT 'jobsweb.noop', now() - n * interval '1 minute', %s FROM generate_series(1, %s) n "
        "ORDER BY n RETURNING id", [max_attempts, runs])]


def test_the_claim_takes_the_runs_due_earliest_although_they_were_created_last(app, sql):
    assert created_newest_first_due(sql, 5) == [1, 2, 3, 4, 5]
    assert claim(sql, limit=2, free=2) == [5, 4]
    assert claim(sql, limit=2, free=2) == [3, 2]
    assert claim(sql, limit=2, free=2) == [1]


def test_the_one_free_slot_goes_to_the_run_due_earliest_when_none_may_be_claimed_ahead(app, sql):
    # Runs on their last attempt are only claimed for a free slot: of three due, the one a single
    # free slot takes is the one due first, not the one created first.
    assert created_newest_first_due(sql, 3, max_attempts=1) == [1, 2, 3]
    assert claim(sql, limit=3, free=1) == [3]
    assert claim(sql, limit=3, free=1) == [2]
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(1, "queued"), (2, "running"), (3, "running")]
