"""The worker's finish-and-claim round trips, sent on its two lanes' threads while the loop works
(engine/worker/round_trips.py), and the loop's per-pass bookkeeping that must stay cheap."""

import logging

import pytest

from jobsweb.core.logs import RunEventRecord
from jobsweb.engine.link import DatabaseUnavailable
from jobsweb.engine.worker.execution import Deadlines, Held
from jobsweb.engine.worker.round_trips import Trip
from jobsweb.engine.worker.stop import WAKE
from jobsweb.engine.worker.loop import FINISH_APART
from tests.processes import insert_many
from tests.test_worker import add, make_worker


def executions(sql):
    return sql("SELECT run_id, count(*) FROM test_executions GROUP BY run_id ORDER BY run_id")


def test_many_short_runs_through_overlapping_trips_each_run_once_with_one_attempt(app, sql):
    run_ids = [add(app, "test.record") for _ in range(120)]
    make_worker(app, concurrency=2).run()
    assert executions(sql) == [(run_id, 1) for run_id in run_ids]
    assert sql("SELECT count(*), count(DISTINCT run_id), max(attempt) FROM job_attempts "
               "WHERE outcome = 'succeeded'") == [(120, 120, 1)]
    assert sql("SELECT count(*) FROM job_runs WHERE status <> 'succeeded' OR locked_by IS NOT NULL") == [(0,)]


def trips_sent(lane):
    """The trips `lane` is sent from now on, recorded as they go."""
    sent, send = [], lane.send
    lane.send = lambda trip: (sent.append(trip), send(trip))
    return sent


def test_a_busy_worker_writes_outcomes_on_its_second_lane_while_its_first_claims(app, sql):
    insert_many(sql, "jobsweb.noop", 3000)
    worker = make_worker(app, concurrency=8)
    claims, finishes = (trips_sent(lane) for lane in worker.trips.lanes)
    worker.run()
    assert sum(len(trip.outcomes) for trip in finishes) >= FINISH_APART and not any(t.limit for t in finishes)
    assert sum(len(trip.claimed_rows()) for trip in claims) == 3000
    assert sql("SELECT count(*), count(DISTINCT run_id), max(attempt) FROM job_attempts "
               "WHERE outcome = 'succeeded'") == [(3000, 3000, 1)]
    assert sql("SELECT runs_done FROM job_workers WHERE id = %s", [worker.id]) == [(3000,)]


def test_a_quiet_worker_uses_one_connection(app, sql):
    for _ in range(3):
        add(app, "test.record")
    worker = make_worker(app, concurrency=4)
    finishes = trips_sent(worker.trips.lanes[1])
    worker.run()
    assert len(executions(sql)) == 3 and finishes == []
    assert sql("SELECT runs_done FROM job_workers WHERE id = %s", [worker.id]) == [(3,)]


def test_runs_a_trip_brings_back_after_a_sigterm_go_back_to_the_queue_unstarted(app, sql):
    run_ids = sorted(add(app, "test.record") for _ in range(3))
    worker = make_worker(app)
    worker._register()
    worker.trips.lanes[0].send(Trip.build(worker.id, [], worker.claimer.params(3, 0)))
    worker.stop.request()  # arrives while the claim is under way
    worker._flush()  # takes the trip back, then writes what became of its runs
    # No handler began: no attempt is recorded, and the one the claim counted is given back.
    assert sql("SELECT id, status, attempts, locked_by FROM job_runs ORDER BY id") == [
        (run_id, "queued", 0, None) for run_id in run_ids]
    assert sql("SELECT count(*) FROM job_attempts") == [(0,)]
    assert executions(sql) == [] and len(worker.held) == 0
    worker._shut_down()


def test_a_wake_up_that_came_while_a_claim_was_under_way_is_claimed_for_at_once(app, sql):
    worker = make_worker(app, forever=True, poll_interval=600)
    worker._register()
    for duty in worker.duties:
        duty.next_at = float("inf")  # this test's ticks claim, and do nothing else
    worker.trips.lanes[0].send(Trip.build(worker.id, [], worker.claimer.params(4, 0)))  # reads job_runs before the run below exists
    worker._collect(None)  # the claim came back empty; the loop has not taken it back yet
    run_id = add(app, "jobsweb.noop")  # committed with its NOTIFY, which the listener turns into:
    worker.finished.put(WAKE)
    worker._collect(0)
    sent = trips_sent(worker.trips.lanes[0])
    worker.tick()  # takes the short claim back: the next one goes at once, not at the next poll
    worker._settle()
    assert [[row[0] for row in trip.claimed_rows()] for trip in sent] == [[run_id]]
    worker._shut_down()


def held_until(deadline):
    return Held(ctx=None, job=None, lease=30, deadline=deadline)


def test_deadlines_come_earliest_first_and_skip_runs_that_ended_or_came_back():
    deadlines = Deadlines()
    held = {1: held_until(5.0), 2: held_until(3.0), 3: held_until(None)}
    for run_id, h in held.items():
        deadlines.add(run_id, h)
    assert deadlines.next(held) == 3.0
    del held[2]  # ended before its deadline
    assert deadlines.next(held) == 5.0
    held[2] = held_until(9.0)  # the same run held again (its next attempt)
    deadlines.add(2, held[2])
    assert deadlines.due(held, now=4.0) == []
    assert deadlines.due(held, now=9.0) == [1, 2]
    assert deadlines.next(held) is None


def test_deadlines_of_ended_runs_do_not_pile_up():
    deadlines, held = Deadlines(), {}
    for run_id in range(1000):
        held[run_id] = held_until(1000.0 + run_id)
        deadlines.add(run_id, held[run_id])
        del held[run_id]  # each run ends long before its deadline
        deadlines.next(held)
    assert len(deadlines.heap) <= 64 + 1


def test_a_run_event_record_has_every_attribute_a_log_record_has():
    plain = logging.LogRecord("jobsweb.worker", logging.INFO, "", 0, "run %d", (7,), None)
    record = RunEventRecord("jobsweb.worker", logging.INFO, "run %d", (7,), {"event": "succeeded", "run_id": 7})
    assert set(vars(plain)) <= set(vars(record))
    assert (record.getMessage(), record.levelname, record.event) == ("run 7", "INFO", "succeeded")
    assert abs(record.created - plain.created) < 5 and 0 <= record.msecs < 1000
    assert logging.Formatter("%(threadName)s %(process)s %(filename)s").format(record)


def test_a_release_whose_answer_was_lost_is_logged_as_written_when_its_resend_is_refused(app, sql, monkeypatch,
                                                                                         caplog):
    # As a finish's (test_worker): the release committed, its answer was lost, the resend is
    # refused since the run is no longer held, and the line says it was written (issue 51).
    caplog.set_level(logging.INFO, logger="jobsweb.worker")
    run_id = add(app, "test.record")
    worker = make_worker(app)
    worker._register()
    worker.trips.lanes[0].send(Trip.build(worker.id, [], worker.claimer.params(1, 0)))
    worker.stop.request()  # its run goes back unstarted
    worker._settle(start=False)
    real, lost = worker.link.fetch_together, []

    def loses_the_answer(batch):
        rows = real(batch)
        if not lost:
            lost.append(True)
            raise DatabaseUnavailable("server closed the connection unexpectedly")
        return rows

    monkeypatch.setattr(worker.link, "fetch_together", loses_the_answer)
    with pytest.raises(DatabaseUnavailable):
        worker._flush()  # the release commits; its answer is lost
    worker._flush()  # sent again, and refused
    lines = [r.getMessage() for r in caplog.records if f"run {run_id} " in r.getMessage()]
    assert lines == [f"run {run_id} test.record: outcome of attempt 1 (released) was written by its first send, "
                     "whose answer was lost"], lines
    assert sql("SELECT status, attempts, locked_by FROM job_runs WHERE id = %s", [run_id]) == [("queued", 0, None)]
    worker._shut_down()
