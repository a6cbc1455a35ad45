"""A worker's Stop and Outages parts together, on a fake clock: one deadline, which no backoff
step outlasts, and a stopping worker that tries the database every half second until then.

Issue 51's drill: a server stopped at T, SIGTERM at T+2 s, the server back at T+8.8 s; the worker
had logged "trying again in 4.0s", then "in 8.0s" (past its deadline), and gave up its last
outcomes 3.2 s after the server was back, with 2 s of its window unused.
"""

import logging

import pytest

from jobsweb.engine.link import Conflicted, DatabaseUnavailable, SchemaIncomplete
from jobsweb.engine.worker.outages import Outages
from jobsweb.engine.worker.stop import Stop


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Connection:
    """What Stop and Outages use of a Link: its cut, and when the database last answered."""

    def __init__(self):
        self.cut_at = None
        self.answered_at = None

    def cut_by(self, deadline):
        self.cut_at = deadline if self.cut_at is None else min(self.cut_at, deadline)


class Duty:
    def __init__(self):
        self.cuts = []

    def cut(self, deadline):
        self.cuts.append(deadline)


def parts(shutdown_timeout=10):
    clock, link, duty, woken = Clock(), Connection(), Duty(), []
    stop = Stop(shutdown_timeout, running=list, links=[link], duties=[duty], wake=lambda: woken.append(1),
                clock=clock)
    return clock, link, duty, woken, stop, Outages(stop, [link], clock=clock)


DOWN = DatabaseUnavailable("connection refused")


@pytest.mark.parametrize("failures_before_the_stop", [0, 1, 3, 4, 6, 12])
def test_a_stopping_worker_tries_every_half_second_and_no_step_ends_past_its_deadline(failures_before_the_stop):
    clock, link, _, _, stop, outages = parts(shutdown_timeout=10.2)
    for _ in range(failures_before_the_stop):  # an outage under way: the steps have doubled
        clock.now = outages.step(DOWN)
    clock.now += 0.3
    stop.request()
    assert stop.drain_deadline() == clock.now + 10.2
    steps, deadline = [], stop.drain_deadline()
    while clock.now < deadline:
        end = outages.step(DOWN)
        assert end <= deadline
        steps.append(round(end - clock.now, 6))
        clock.now = end
    assert steps == [0.5] * 20 + [0.2]
    # The last writes (after the drain) try until a round trip no longer fits before the cut: a
    # connect with less than libpq's 2 s left still reaches a server just back (issue 51).
    last_try = stop.last_try_by()
    assert last_try == pytest.approx(deadline + 0.75 - 0.1)
    steps = []
    while clock.now < last_try:
        end = outages.step(DOWN)
        assert end <= last_try
        steps.append(round(end - clock.now, 6))
        clock.now = end
    assert steps == [0.5, 0.15]


def test_before_a_stop_the_steps_double_up_to_30_seconds_and_start_again_once_the_database_answers():
    clock, link, _, _, _, outages = parts()
    steps = []
    for _ in range(8):
        end = outages.step(DOWN)
        steps.append(end - clock.now)
        clock.now = end
    assert steps == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert outages.claims_in_doubt()
    outages.answered()  # the database has not answered since the outage began: still in it
    assert outages.step(DOWN) - clock.now == 30
    link.answered_at = clock.now + 1
    clock.now += 1
    outages.answered()
    clock.now += 0.1
    assert outages.step(DOWN) - clock.now == 0.5  # a new outage
    clock.now += 0.5
    outages.answered()  # the answer came before this outage began: it goes on
    assert outages.step(DOWN) - clock.now == 1


def test_a_conflict_is_no_outage():
    clock, _, _, _, _, outages = parts()
    assert outages.step(Conflicted("could not serialize access")) is None
    assert not outages.claims_in_doubt() and outages.step(DOWN) - clock.now == 0.5


def test_a_signal_starts_the_one_deadline_that_cuts_the_links_and_the_duties_and_wakes_the_loop():
    clock, link, duty, woken, stop, _ = parts(shutdown_timeout=10)
    assert (stop.requested(), stop.drain_deadline(), stop.last_writes_by()) == (0, None, None)
    assert stop.bound(clock.now + 60) == clock.now + 60  # not stopping: no bound
    signalled = clock.now
    stop.request()
    assert (stop.requested(), stop.drain_deadline()) == (1, signalled + 10)
    assert link.cut_at == stop.last_writes_by() == signalled + 10.75
    assert stop.exit_by() == signalled + 11
    assert duty.cuts == [signalled] and woken == [1]
    assert stop.bound(signalled + 60) == signalled + 10 and stop.bound(signalled + 3) == signalled + 3
    clock.now += 4
    stop.on_its_own()  # the loop ends after the signal: the signal's bound holds
    assert link.cut_at == signalled + 10.75
    stop.request()  # a second signal: the drain ends now
    assert stop.drain_deadline() == clock.now and link.cut_at == clock.now + 0.75


def test_a_worker_that_stops_on_its_own_bounds_its_last_writes_from_then():
    clock, link, duty, woken, stop, _ = parts()
    stop.on_its_own()
    assert link.cut_at == stop.last_writes_by() == clock.now + 0.75
    assert stop.drain_deadline() is None and duty.cuts == [] and woken == []


def test_a_stopping_workers_outage_is_one_line_not_one_a_step(caplog):
    caplog.set_level(logging.WARNING, logger="jobsweb.worker")
    clock, _, _, _, stop, outages = parts()
    clock.now = outages.step(DOWN)
    stop.request()
    for _ in range(5):
        clock.now = outages.step(DOWN)
    assert [r.getMessage() for r in caplog.records] == [
        "database unavailable (connection refused); trying again in 0.5s",
        "database unavailable (connection refused); stopping: trying again every 0.5s until the stop deadline"]


def test_a_schema_outage_is_one_line_and_a_growing_pause_while_the_database_answers_everything_else(caplog):
    # A function dropped under a running worker: its claims fail, its heartbeats answer. Each
    # answer ended "the outage" and the next step started again at 0.5 s: two lines a step,
    # four a second, until `flask jobs migrate` (issue 51, item 3).
    caplog.set_level(logging.INFO, logger="jobsweb.worker")
    clock, link, _, _, _, outages = parts()
    missing = SchemaIncomplete("jobsweb's schema lacks what a statement needs (function x does not exist): "
                               "run `flask jobs migrate`")
    steps = []
    for _ in range(5):
        end = outages.step(missing)
        steps.append(end - clock.now)
        clock.now = end
        link.answered_at = clock.now  # a heartbeat answered meanwhile
        outages.answered()
    assert steps == [0.5, 1, 2, 4, 8]
    assert [r.getMessage() for r in caplog.records] == [
        f"{missing}; trying again with a growing pause, up to 30s"]
