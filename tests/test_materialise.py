import logging
import time

from jobsweb import definitions
from jobsweb.engine import statements
from tests.conftest import committed, wait_for

# README, "Schedules": "`all` runs each one (at most 20 per tick)" and due definitions are
# locked "500 at a time".
CATCH_UP_LIMIT = 20
DEFINITIONS_PER_TICK = 500


def define(app, name="hourly", schedule="@every 1h", **kwargs):
    with committed(app):
        return definitions.define(name, "jobsweb.noop", schedule, **kwargs).id


def outage(sql, hours):
    """Pretend nothing ticked: the pending slot was `hours` ago.

    Hourly slots, so that a test is never split by a slot boundary passing while it runs.
    """
    sql("UPDATE job_definitions SET next_run_at = date_trunc('hour', now()) - make_interval(hours => %s)",
        [hours])


def runs(sql):
    return sql("SELECT status, count(*) FROM job_runs GROUP BY status ORDER BY status")


def test_a_due_slot_becomes_one_queued_run_and_the_definition_moves_to_the_next_slot(app, sql, materialise):
    define(app)
    outage(sql, 0)
    assert materialise() == 1
    [(status, on_slot, reason)] = sql(
        "SELECT r.status, r.scheduled_for = date_trunc('hour', now()), r.reason FROM job_runs r")
    assert (status, on_slot, reason) == ("queued", True, None)
    assert sql("SELECT next_run_at = date_trunc('hour', now()) + interval '1 hour', missed_count "
               "FROM job_definitions") == [(True, 0)]
    assert materialise() == 0  # nothing due any more


def test_nothing_is_materialised_before_its_slot(app, sql, materialise):
    define(app, schedule="0 6 * * *")
    assert materialise() == 0
    assert runs(sql) == []


def test_misfire_latest_runs_the_newest_missed_slot_and_records_the_others_as_missed(app, sql, materialise):
    define(app, misfire="latest")
    outage(sql, 10)
    materialise()
    assert runs(sql) == [("missed", 10), ("queued", 1)]
    [(newest,)] = sql("SELECT scheduled_for = date_trunc('hour', now()) FROM job_runs WHERE status = 'queued'")
    assert newest
    [(reason,)] = sql("SELECT reason FROM job_runs WHERE status = 'missed' ORDER BY scheduled_for LIMIT 1")
    assert reason.startswith("no tick between ") and "misfire policy 'latest'" in reason
    assert sql("SELECT missed_count, next_run_at > now() FROM job_definitions") == [(10, True)]


def test_misfire_all_runs_every_missed_slot(app, sql, materialise):
    define(app, misfire="all", overlap="allow")
    outage(sql, 10)
    materialise()
    assert runs(sql) == [("queued", 11)]
    assert sql("SELECT count(DISTINCT scheduled_for) FROM job_runs") == [(11,)]


def test_misfire_all_is_bounded_and_records_the_slots_beyond_the_bound_as_missed(app, sql, materialise):
    define(app, misfire="all", overlap="allow")
    outage(sql, CATCH_UP_LIMIT + 9)
    materialise()
    assert runs(sql) == [("missed", 10), ("queued", CATCH_UP_LIMIT)]
    assert sql("SELECT missed_count FROM job_definitions") == [(10,)]


def test_misfire_skip_runs_nothing_late_and_resumes_at_the_next_future_slot(app, sql, materialise):
    define(app, misfire="skip", grace_seconds=0)
    outage(sql, 3)
    materialise()
    assert runs(sql) == [("missed", 4)]
    [(reason,)] = sql("SELECT reason FROM job_runs ORDER BY scheduled_for DESC LIMIT 1")
    assert "misfire policy 'skip'" in reason
    assert sql("SELECT next_run_at > now(), missed_count FROM job_definitions") == [(True, 4)]


def test_misfire_skip_still_runs_a_slot_that_is_on_time(app, sql, materialise):
    define(app, misfire="skip", grace_seconds=3600)
    outage(sql, 3)
    materialise()
    assert runs(sql) == [("missed", 3), ("queued", 1)]


def test_a_long_outage_of_a_frequent_schedule_writes_a_bounded_number_of_rows(app, sql, materialise):
    define(app, misfire="latest")
    outage(sql, 24 * 200)  # 200 days of an hourly job
    materialise()
    assert runs(sql) == [("missed", 51), ("queued", 1)]
    assert sql("SELECT missed_count FROM job_definitions") == [(24 * 200,)]
    [(summary,)] = sql("SELECT reason FROM job_runs ORDER BY scheduled_for LIMIT 1")
    assert "this row stands for" in summary


def test_overlap_skip_records_a_skipped_slot_while_the_previous_run_is_queued(app, sql, materialise):
    define(app)
    with committed(app):
        previous = definitions.run_now("hourly")
    outage(sql, 0)
    materialise()
    assert sql("SELECT status, reason FROM job_runs WHERE id <> %s", [previous]) == [
        ("skipped", f"previous run {previous} still queued")]


def test_overlap_allow_runs_alongside_the_previous_run(app, sql, materialise):
    define(app, overlap="allow")
    with committed(app):
        definitions.run_now("hourly")
    outage(sql, 0)
    materialise()
    assert runs(sql) == [("queued", 2)]


def test_overlap_queue_creates_a_run_that_is_claimed_only_after_the_previous_finishes(app, sql, materialise):
    define(app, overlap="queue")
    with committed(app):
        previous = definitions.run_now("hourly")
    outage(sql, 0)
    materialise()
    [(waiting, after)] = sql("SELECT id, after_run_id FROM job_runs WHERE id <> %s", [previous])
    assert after == previous

    def claim():
        return [row[0] for row in sql(statements.CLAIM_RUNS, {
            "worker": "test", "lease": 60, "job_types": ["jobsweb.noop"], "limit": 10, "free": 10,
            "queues": None})]

    assert claim() == [previous]
    assert claim() == []  # still running
    sql("UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE id = %s", [previous])
    assert claim() == [waiting]


def test_overlap_queue_with_misfire_all_chains_the_catch_up_runs(app, sql, materialise):
    define(app, overlap="queue", misfire="all")
    outage(sql, 2)
    materialise()
    rows = sql("SELECT id, after_run_id FROM job_runs ORDER BY scheduled_for")
    assert [after for _, after in rows] == [None, rows[0][0], rows[1][0]]


def test_overlap_skip_with_misfire_all_runs_the_first_catch_up_slot_and_skips_the_others(app, sql, materialise):
    define(app, overlap="skip", misfire="all")
    outage(sql, 2)
    materialise()
    rows = sql("SELECT id, status, reason, after_run_id FROM job_runs ORDER BY scheduled_for")
    first = rows[0][0]
    assert rows == [(first, "queued", None, None),
                    (rows[1][0], "skipped", f"previous run {first} still queued", None),
                    (rows[2][0], "skipped", f"previous run {first} still queued", None)]


def test_catch_up_chains_of_definitions_materialised_together_wait_only_for_their_own_runs(app, sql, materialise):
    for name in ("first", "second"):
        define(app, name, overlap="queue", misfire="all")
    outage(sql, 2)
    assert materialise() == 2  # one batch, one INSERT for both
    chains = sql("SELECT definition_id, array_agg(id ORDER BY scheduled_for), "
                 "array_agg(after_run_id ORDER BY scheduled_for) FROM job_runs GROUP BY definition_id")
    assert len(chains) == 2
    for _, ids, afters in chains:
        assert afters == [None, ids[0], ids[1]]


def test_a_catch_up_chain_that_meets_an_existing_slot_waits_for_that_run(app, sql, materialise):
    define(app, overlap="queue", misfire="all")
    outage(sql, 2)
    # As if an earlier tick created the first slot and its advance was lost.
    [(existing,)] = sql("INSERT INTO job_runs (definition_id, job_type, scheduled_for) "
                        "SELECT id, job_type, next_run_at FROM job_definitions RETURNING id")
    materialise()
    rows = sql("SELECT id, after_run_id FROM job_runs ORDER BY scheduled_for")
    assert [after for _, after in rows] == [None, existing, rows[1][0]]


def test_the_unique_slot_refuses_a_second_run_for_one_slot(app, sql, materialise):
    define(app)
    outage(sql, 0)
    [(slot,)] = sql("SELECT next_run_at FROM job_definitions")
    materialise()
    sql("UPDATE job_definitions SET next_run_at = %s", [slot])  # as if the advance was lost
    materialise()
    assert sql("SELECT count(*) FROM job_runs") == [(1,)]


def test_the_slot_guard_holds_the_runs_of_definitions_only_and_still_creates_a_lost_slot_once(
        app, sql, materialise):
    """Migration 0031: job_runs_definition_slot is a unique index on the runs of definitions alone,
    so an enqueued run writes no entry into it (three fewer a run); a slot whose definition's advance
    was lost is still created once (INSERT_SLOTS' conflict target infers that index)."""
    define(app)
    outage(sql, 0)
    [(slot,)] = sql("SELECT next_run_at FROM job_definitions")
    assert materialise() == 1
    sql("UPDATE job_definitions SET next_run_at = %s", [slot])  # as if the advance was lost
    materialise()
    assert sql("SELECT count(*) FROM job_runs") == [(1,)]
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 20)")  # enqueued
    # A rebuilt index's pg_class.reltuples is the count of entries it was built with.
    sql("REINDEX INDEX job_runs_definition_slot")
    sql("REINDEX INDEX job_runs_pkey")
    assert sql("SELECT count(*) FROM job_runs") == [(21,)]
    assert sql("SELECT reltuples::int FROM pg_class WHERE relname IN ('job_runs_definition_slot', 'job_runs_pkey') "
               "ORDER BY relname") == [(1,), (21,)]


def test_four_worker_processes_ticking_together_create_each_slot_exactly_once(app, sql, spawn_worker):
    """Every second, ten definitions fall due while four real workers race for them."""
    workers = [spawn_worker("--forever", "--poll-interval", "0.01", "--max-runtime", "8")
               for _ in range(4)]
    # The definitions come once all four are ticking: on a loaded machine a worker can take
    # seconds to start, and the first one up took every slot alone (CI: 1 materialiser of 4).
    wait_for(lambda: sql("SELECT count(*) FROM job_workers WHERE stopped_at IS NULL")[0][0] == 4,
             message="four workers registered")
    with committed(app):
        for n in range(10):
            definitions.define(f"every-second-{n}", "test.record", "@every 1s", misfire="all",
                               overlap="allow")
    outputs = [w.communicate(timeout=60)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], outputs
    assert not any(bad in out for out in outputs for bad in ("already exists", "Traceback", "unavailable")), outputs
    per_definition = sql("""
        SELECT count(*), count(DISTINCT scheduled_for),
               extract(epoch FROM max(scheduled_for) - min(scheduled_for))::int + 1
        FROM job_runs GROUP BY definition_id""")
    assert len(per_definition) == 10
    for runs_made, distinct_slots, slots_in_span in per_definition:
        assert runs_made == distinct_slots == slots_in_span  # no slot twice, none left out
        assert runs_made >= 2
    # Two or more workers did materialise: the race was real.
    assert sum("queued for slot" in out for out in outputs) >= 2
    executed = sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions")
    finished = sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")
    assert executed[0][0] == executed[0][1] == finished[0][0]


def _tick_only_worker(app):
    from jobsweb.commands import build_worker

    return build_worker(app, concurrency=1, poll_interval=0.05, shutdown_timeout=1)


class FrozenClock:
    """The worker loop's `time`, with a monotonic clock that moves only when the test says."""

    def __init__(self):
        self.now = time.monotonic()

    def monotonic(self):
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def test_after_an_idle_pass_the_worker_waits_before_materialising_again(app, sql, monkeypatch):
    from jobsweb.engine.worker import loop as worker_module
    from jobsweb.scheduling.materialise import IDLE_INTERVAL

    clock = FrozenClock()
    monkeypatch.setattr(worker_module, "time", clock)  # however long the steps below take
    worker = _tick_only_worker(app)
    worker.claimer.concurrency = 0  # no free slot: tick() only recovers and materialises
    assert worker.tick() is False
    define(app)
    outage(sql, 0)
    clock.now += IDLE_INTERVAL * 0.9
    worker.tick()  # within the idle interval: skipped
    assert runs(sql) == []
    clock.now += IDLE_INTERVAL * 0.1  # the interval has passed
    assert worker.tick() is True
    assert runs(sql) == [("queued", 1)]
    worker.link.close()


def test_a_backlog_bigger_than_one_pass_is_materialised_in_back_to_back_passes(app, sql):
    for n in range(DEFINITIONS_PER_TICK + 20):
        define(app, f"hourly-{n}")
    outage(sql, 0)
    worker = _tick_only_worker(app)
    worker.claimer.concurrency = 0
    assert worker.tick() is True
    assert runs(sql) == [("queued", DEFINITIONS_PER_TICK)]  # 500 at a time
    assert worker.tick() is True  # the next pass at once, not after the idle interval
    assert runs(sql) == [("queued", DEFINITIONS_PER_TICK + 20)]
    worker.link.close()


def test_slots_in_the_second_pass_of_a_repeated_hour_are_created_and_logged_as_created(app, sql, materialise,
                                                                                        caplog):
    # Minute field a step: it fires in both passes of Madrid's repeated 02:00-03:00 of 2025-10-26.
    define(app, schedule="*/30 2 26 10 *", timezone="Europe/Madrid", misfire="all", overlap="allow")
    sql("UPDATE job_definitions SET next_run_at = '2025-10-26 00:00+00'")  # 02:00 CEST, the first pass
    with caplog.at_level(logging.INFO, logger="jobsweb.materialise"):
        materialise()
    passes = sql("SELECT id FROM job_runs WHERE status = 'queued' AND scheduled_for >= '2025-10-26 00:00+00' "
                 "AND scheduled_for < '2025-10-26 02:00+00' ORDER BY scheduled_for")
    assert len(passes) == 4  # 02:00 and 02:30 CEST, then 02:00 and 02:30 CET
    assert "already exists" not in caplog.text
    assert all(f"run {run_id} queued" in caplog.text for (run_id,) in passes)
