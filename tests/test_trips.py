"""A worker's Trips on their own, on a real PostgreSQL: the outcomes not yet written, the round
trips that write them with a claim, the ones a lost database hands back, and the runs done
counted onto the worker's job_workers row."""

import os
import queue
import socket

import pytest

from jobsweb.core.database import libpq_url
from jobsweb.engine import statements, upkeep
from jobsweb.engine.jobs import registry
from jobsweb.engine.link import DatabaseUnavailable, Link
from jobsweb.engine.worker.execution import Outcome
from jobsweb.engine.worker.round_trips import Trip, Trips
from tests.conftest import EVENT_TIMEOUT
from tests.test_worker import add

WORKER = "worker-1"
NOWHERE = "host=127.0.0.1 port=1 dbname=jobsweb_test user=nobody"  # nothing listens on port 1


@pytest.fixture
def links(database_url_for_tests):
    """link(conninfo=None): a Link (on the test database unless `conninfo` says), closed at the end."""
    made = []

    def link(conninfo=None):
        made.append(Link(conninfo or libpq_url(database_url_for_tests)))
        return made[-1]

    yield link
    for link in made:
        link.close()


@pytest.fixture
def reports():
    """What the lanes hand back (a Trip each), from their threads."""
    return queue.SimpleQueue()


@pytest.fixture
def make_trips(links, reports):
    """make_trips(finish_conninfo=None): worker-1's Trips and its claims' link; its lanes end at the end."""
    made = []

    def make(finish_conninfo=None):
        link = links()
        trips = Trips(WORKER, link, links(finish_conninfo), reports.put)
        made.append(trips)
        return trips, link

    yield make
    for trips in made:
        trips.stop()


def register(link):
    """worker-1's job_workers row, as Worker._register adds it."""
    link.fetch(upkeep.REGISTER_WORKER, {"worker": WORKER, "host": socket.gethostname(), "pid": os.getpid(),
                                        "job_types": registry.names(), "queues": None, "concurrency": 2})


def claim_params(limit):
    return {"worker": WORKER, "lease": 30, "job_types": registry.names(), "limit": limit, "free": limit,
            "queues": None}


def claimed(app, link, runs):
    """`runs` runs of jobsweb.noop enqueued and claimed by worker-1; their ids."""
    for _ in range(runs):
        add(app, "jobsweb.noop")
    return [row[0] for row in link.fetch(statements.CLAIM_RUNS, claim_params(runs))]


def succeeded(run_id):
    return Outcome(run_id, "jobsweb.noop", 1, WORKER, "succeeded", result={"run": run_id})


def came_back(trips, reports):
    """Wait for the trip under way and hand it back to `trips`, as the loop does."""
    trip = reports.get(timeout=EVENT_TIMEOUT)
    trips.came_back(trip)
    return trip


def runs_done(sql):
    return sql("SELECT runs_done FROM job_workers WHERE id = %s", [WORKER])


def test_pending_outcomes_and_a_claim_go_as_one_trip_on_the_claims_lane(app, make_trips, reports, sql):
    trips, link = make_trips()
    register(link)
    run_ids = claimed(app, link, 2)
    for _ in range(2):
        add(app, "jobsweb.noop")  # runs 3 and 4, for the claim below
    trips.add([succeeded(run_id) for run_id in run_ids])
    assert (trips.pending_count(), trips.pending_ids()) == (2, [1, 2])
    trips.send_claim(claim_params(5))
    assert (trips.pending_count(), trips.under_way(), trips.claim_lane_free(), trips.finish_lane_free()) == (
        0, 1, False, True)
    trip = came_back(trips, reports)
    assert [sql for sql, _ in trip.batch] == [statements.FINISH_RUNS, upkeep.WORKER_SEEN, statements.CLAIM_RUNS]
    taken, unavailable = trips.take_back()
    assert (taken, unavailable, trip.lane is trips.lanes[0]) == ([trip], None, True)
    assert (trips.under_way(), trips.claim_lane_free(), trips.awaited()) == (0, True, False)
    assert [row[:2] for row in trip.finished_rows()] == [(1, "succeeded"), (2, "succeeded")]
    assert [row[0] for row in trip.claimed_rows()] == [3, 4]
    assert sql("SELECT id, status, locked_by FROM job_runs ORDER BY id") == [
        (1, "succeeded", None), (2, "succeeded", None), (3, "running", WORKER), (4, "running", WORKER)]
    assert runs_done(sql) == [(2,)]  # counted in the same commit
    trips.written(trip)
    assert trips.seen() == (False, None) and runs_done(sql) == [(2,)]  # nothing counted twice


def test_write_now_with_nothing_pending_sends_nothing(make_trips, reports):
    trips, _ = make_trips()
    assert trips.write_now() is None
    assert (trips.under_way(), reports.empty()) == (0, True)


def test_outcomes_of_a_trip_the_database_never_answered_are_pending_again_ahead_of_later_ones(app, make_trips,
                                                                                              reports, sql):
    trips, link = make_trips(finish_conninfo=NOWHERE)
    register(link)
    run_ids = claimed(app, link, 3)
    trips.add([succeeded(1), succeeded(2)])
    trips.send_finishes()  # on the second lane, whose database is away
    trips.add([succeeded(3)])  # a handler returned meanwhile
    trip = came_back(trips, reports)
    assert (trip.lane is trips.lanes[1], isinstance(trip.error, DatabaseUnavailable)) == (True, True)
    taken, unavailable = trips.take_back()
    assert (taken, isinstance(unavailable, DatabaseUnavailable)) == ([trip], True)
    assert trips.pending_ids() == [1, 2, 3]
    assert sql("SELECT count(*) FROM job_runs WHERE status = 'running'") == [(3,)]
    # Written once the database is back, and counted as runs done once: none were by the failed trip.
    written = trips.write_now()
    trips.written(written)
    assert [row[:2] for row in written.finished_rows()] == [(1, "succeeded"), (2, "succeeded"), (3, "succeeded")]
    assert trips.pending_count() == 0 and run_ids == [1, 2, 3]
    assert trips.seen() == (False, None) and runs_done(sql) == [(3,)]


def test_a_failed_trip_checked_puts_its_outcomes_back_and_raises(make_trips):
    trips, _ = make_trips()
    trips.add([succeeded(3)])
    trip = Trip.build(WORKER, [succeeded(1), succeeded(2)], counted=2)
    trip.error = DatabaseUnavailable("connection refused")
    with pytest.raises(DatabaseUnavailable, match="connection refused"):
        trips.check(trip)
    assert trips.pending_ids() == [1, 2, 3]


def test_seen_counts_the_runs_done_onto_the_workers_row_and_says_whether_an_operator_quieted_it(app, make_trips,
                                                                                                sql):
    trips, link = make_trips()
    register(link)
    claimed(app, link, 2)
    trips.add([succeeded(1), succeeded(2)])
    trips.written(trips.write_now())  # a stopping worker's last writes: no count rides with them
    assert runs_done(sql) == [(0,)]
    assert trips.seen() == (False, None)
    assert runs_done(sql) == [(2,)]
    sql("UPDATE job_workers SET quiet_at = now() WHERE id = %s", [WORKER])
    assert trips.seen() == (True, None)
    assert runs_done(sql) == [(2,)]
    sql("UPDATE job_workers SET stop_requested_at = now(), stop_requested_by = 'ops@example.com' WHERE id = %s",
        [WORKER])
    assert trips.seen() == (True, "ops@example.com")  # the Workers page's Stop: the loop stops as on SIGTERM


def test_the_outcomes_written_lately_are_remembered_up_to_the_bound_oldest_forgotten_first(monkeypatch):
    # For LOST_CLAIMS's word after a failover (engine/worker/leases.py); bounded, as a busy worker
    # writes tens of thousands of outcomes a minute.
    from jobsweb.engine.worker import round_trips

    monkeypatch.setattr(round_trips, "LATELY_WRITTEN", 3)
    trips = Trips(WORKER, None, None, lambda trip: None)
    for first in (1, 3):
        outcomes = [Outcome(run_id, "jobsweb.noop", 2, WORKER, "succeeded") for run_id in (first, first + 1)]
        trips.written(Trip(outcomes, 0, results=[[(o.run_id, "succeeded", None, 0.0) for o in outcomes]]))
    assert trips.lately_written() == {2: 2, 3: 2, 4: 2}


def test_written_says_when_each_retry_it_wrote_falls_due_by_the_clock_it_came_back_at():
    # FINISH_RUNS returns each failed run's delay to its retry, read on the database's clock; the
    # loop claims at each (Claimer.due_at), not at its next poll.
    trips = Trips(WORKER, None, None, lambda trip: None)
    outcomes = [Outcome(run_id, "jobsweb.noop", 1, WORKER, "failed") for run_id in (1, 2, 3)]
    trip = Trip(outcomes, 0, results=[[(1, "failed", 0.8, 0.0), (2, "dead", None, 0.0), (3, "failed", 30, 0.0)]])
    trip.back_at = 100.0
    assert trips.written(trip) == [100.8, 130.0]
    assert trips.written(Trip([], 0, results=[[]])) == []
