"""A worker's Leases on their own, over a real HeldRuns and a real PostgreSQL: heartbeats that
extend what the worker holds and let go of what it no longer does, a handler's extend_lease, and
the claims a broken connection committed unseen."""

import logging
import queue

import pytest

from jobsweb.core.database import libpq_url
from jobsweb.engine import statements
from jobsweb.engine.jobs import registry
from jobsweb.engine.jobs.registry import JobContext
from jobsweb.engine.link import Link
from jobsweb.engine.worker.execution import Failures
from jobsweb.engine.worker.held_runs import HeldRuns
from jobsweb.engine.worker.leases import Leases
from tests.conftest import EVENT_TIMEOUT
from tests.test_worker import add

WORKER = "worker-1"


@pytest.fixture
def links(database_url_for_tests):
    """link(): a Link on the test database, closed at the end."""
    made = []

    def link():
        made.append(Link(libpq_url(database_url_for_tests)))
        return made[-1]

    yield link
    for link in made:
        link.close()


def claim(link, worker, limit):
    """Claim up to `limit` runs for `worker` as a worker's claim does; CLAIM_RUNS's rows."""
    return link.fetch(statements.CLAIM_RUNS, {"worker": worker, "lease": 30, "job_types": registry.names(),
                                              "limit": limit, "free": limit, "queues": None})


@pytest.fixture
def reports():
    return queue.SimpleQueue()


@pytest.fixture
def holding(app, links, reports):
    """holding(runs): `runs` runs of jobsweb.sleep (30 s, ended early when asked to stop)
    enqueued, claimed by worker-1 and held by its HeldRuns; (held, leases). What is still held
    at the end is given up, so that its handlers return."""
    made = []

    def hold(runs):
        for _ in range(runs):
            add(app, "jobsweb.sleep", {"seconds": 30})
        link = links()
        held = HeldRuns(app, WORKER, concurrency=runs, lease=30, default_timeout=None,
                        failures=Failures.from_config(app.config), report=reports.put, context=JobContext)
        made.append(held)
        held.start(claim(link, WORKER, runs), back_at=0.0)
        return held, Leases(held, link, links(), WORKER, 30)

    yield hold
    for held in made:
        held.give_up_all()
        held.close()


def leases_left(sql):
    """Each run's holder and how long its lease has left: under 5 s, up to 60 s or over 500 s."""
    return sql("SELECT id, locked_by, CASE WHEN locked_until < now() + interval '5 seconds' THEN 'under 5 s' "
               "WHEN locked_until < now() + interval '60 seconds' THEN 'up to 60 s' "
               "WHEN locked_until > now() + interval '500 seconds' THEN 'over 500 s' ELSE 'other' END "
               "FROM job_runs ORDER BY id")


def test_a_heartbeat_extends_every_held_runs_lease_by_its_own_length(holding, sql):
    held, leases = holding(2)
    sql("UPDATE job_runs SET locked_until = now() + interval '1 second'")
    held.get(2).lease = 600  # a definition's longer lease, or a handler's extend_lease
    leases.heartbeat()
    assert leases_left(sql) == [(1, WORKER, "up to 60 s"), (2, WORKER, "over 500 s")]
    assert held.ids() == [1, 2] and not any(h.ctx.cancelled for h in held.snapshot())


def test_a_heartbeat_lets_go_of_a_run_another_worker_now_holds_and_stops_its_handler(holding, sql, reports, caplog):
    caplog.set_level(logging.WARNING, logger="jobsweb.worker")
    held, leases = holding(2)
    sql("UPDATE job_runs SET locked_by = 'worker-2', locked_until = now() + interval '1 second' WHERE id = 2")
    lost, kept = held.get(2), held.get(1)
    leases.heartbeat()
    assert held.ids() == [1]
    assert (lost.ctx.cancelled, kept.ctx.cancelled) == (True, False)
    finished = reports.get(timeout=EVENT_TIMEOUT)  # asked to stop, its handler returned
    assert finished.held is lost and held.returned(finished, stopping=False) is None
    assert leases_left(sql) == [(1, WORKER, "up to 60 s"), (2, "worker-2", "under 5 s")]  # not extended
    assert [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()] == [
        "run 2 jobsweb.sleep: lease lost (another worker took it over or it was cancelled); "
        "asking the handler to stop"]


def test_a_heartbeat_asks_the_handler_of_a_run_an_operator_cancelled_to_stop_and_keeps_its_lease(holding, sql, reports):
    held, leases = holding(2)
    sql("UPDATE job_runs SET cancel_requested_at = now(), locked_until = now() + interval '1 second' WHERE id = 1")
    cancelled = held.get(1)
    leases.heartbeat()
    assert held.ids() == [1, 2]  # held until its handler returns, so its outcome can be written
    assert (cancelled.cancel_requested, cancelled.ctx.cancelled, held.get(2).ctx.cancelled) == (True, True, False)
    assert leases_left(sql) == [(1, WORKER, "up to 60 s"), (2, WORKER, "up to 60 s")]
    finished = reports.get(timeout=EVENT_TIMEOUT)
    assert finished.held is cancelled
    outcome = held.returned(finished, stopping=False)
    assert (outcome.run_id, outcome.outcome, outcome.error) == (1, "cancelled", "cancelled by an operator")


def test_extend_lease_holds_a_run_longer_only_for_the_context_the_worker_holds_it_by(holding, sql):
    held, leases = holding(2)
    sql("UPDATE job_runs SET locked_until = now() + interval '1 second'")
    first, second = held.get(1), held.get(2)
    assert leases.extend(first.ctx, 600) is True
    # A context of the same run that the worker does not hold it by (an attempt before this one).
    assert leases.extend(JobContext(2, "jobsweb.sleep", {"seconds": 30}, 1, 3), 600) is False
    held.drop(second)  # its lease lost at a heartbeat
    assert leases.extend(second.ctx, 600) is False
    second.stop(force=True)
    assert leases_left(sql) == [(1, WORKER, "over 500 s"), (2, WORKER, "under 5 s")]
    assert first.lease == 600  # the next heartbeats extend it by as much


def test_lost_claims_are_the_runs_this_worker_locks_that_it_does_not_know_of(app, holding, links):
    held, leases = holding(1)  # run 1: held
    for _ in range(3):
        add(app, "jobsweb.noop")
    link = links()
    claim(link, WORKER, 2)  # runs 2 and 3: a claim whose answer never came back
    claim(link, "worker-2", 1)  # run 4: another worker's
    outcomes = sorted(leases.lost_claims(held.ids()), key=lambda o: o.run_id)
    assert [(o.run_id, o.job_type, o.attempt, o.worker, o.outcome) for o in outcomes] == [
        (2, "jobsweb.noop", 1, WORKER, "released"), (3, "jobsweb.noop", 1, WORKER, "released")]
    assert sorted(o.run_id for o in leases.lost_claims([])) == [1, 2, 3]
