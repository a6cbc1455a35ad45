"""A worker's Claimer on its own, no database: how many runs it claims, when it claims again at
once, and what its claim asks CLAIM_RUNS for. The trips are stand-ins with what the Claimer
reads of a round_trips.Trip: its limit and the rows its claim brought."""

from jobsweb.engine.jobs import registry
from jobsweb.engine.worker.claimer import Claimer


class Trip:
    """A trip that came back: `limit` runs asked for (0: no claim), `claimed` of them brought."""

    def __init__(self, limit, claimed=0):
        self.limit = limit
        self.rows = [(run_id,) for run_id in range(1, claimed + 1)]

    def claimed_rows(self):
        return self.rows


def claimer(concurrency=4, queues=None):
    return Claimer("worker-1", concurrency=concurrency, lease=30, queues=queues)


def test_a_new_claimer_claims_one_run_per_free_slot():
    c = claimer()
    assert (c.limit(0, now=0.0), c.limit(3, now=0.0), c.limit(4, now=0.0)) == (4, 1, 0)
    assert not c.at_once(0, now=0.0)


def test_after_a_claim_that_came_back_short_nothing_is_claimed_until_the_next_pass():
    c = claimer()
    short = Trip(limit=4, claimed=2)
    c.came_back([short])
    assert c.limit(0, now=0.0, came_back=[short]) == 0
    assert not c.at_once(0, now=0.0)
    # The loop's next pass (a handler's return, a wake-up, the poll) has no claim coming back.
    assert c.limit(2, now=0.0) == 2
    # A trip that only wrote outcomes is no claim: it neither stops the next one nor says more is due.
    finishes = Trip(limit=0)
    c.came_back([finishes])
    assert c.limit(2, now=0.0, came_back=[finishes]) == 2 and not c.at_once(2, now=0.0)


def test_a_full_claim_means_more_is_due_and_the_next_goes_at_once_while_a_slot_is_free():
    c = claimer()
    full = Trip(limit=4, claimed=4)
    c.came_back([full])
    assert c.limit(0, now=0.0, came_back=[full]) == 4
    assert c.at_once(0, now=0.0) and c.at_once(3, now=0.0)
    assert not c.at_once(4, now=0.0)  # every slot taken and nothing claimed ahead yet
    c.came_back([Trip(limit=4, claimed=0)])  # the next one came back empty: nothing more due
    assert not c.at_once(0, now=0.0)


def test_claims_that_came_back_together_mean_more_is_due_only_if_each_was_full():
    c = claimer()
    full, short = Trip(limit=4, claimed=4), Trip(limit=3, claimed=1)
    c.came_back([full, short])
    assert not c.at_once(0, now=0.0)
    assert c.limit(0, now=0.0, came_back=[full, short]) == 0


def test_a_wake_up_since_the_last_claim_counts_a_short_claim_as_full():
    c = claimer()
    c.woke()  # a run was enqueued while the claim below was under way: it may have missed it
    short = Trip(limit=4, claimed=1)
    c.came_back([short])
    assert c.at_once(1, now=0.0)
    assert c.limit(1, now=0.0, came_back=[short]) == 3


def test_sending_a_claim_answers_the_wake_ups_so_far():
    c = claimer()
    c.woke()
    c.params(4, busy=0)  # the claim sent after the wake-up sees the run enqueued before it
    short = Trip(limit=4, claimed=1)
    c.came_back([short])
    assert not c.at_once(1, now=0.0)
    assert c.limit(1, now=0.0, came_back=[short]) == 0


def test_the_claims_parameters_name_the_worker_its_lease_the_limit_the_free_slots_and_queues():
    c = claimer(concurrency=4, queues=["mail", "reports"])
    params = c.params(7, busy=1)
    assert params.pop("job_types") == registry.names()
    assert params == {"worker": "worker-1", "lease": 30, "limit": 7, "free": 3, "queues": ["mail", "reports"]}
    # Runs claimed ahead may outnumber the slots: no slot is free, never fewer than none.
    assert c.params(2, busy=6)["free"] == 0
    assert claimer().params(4, busy=0)["queues"] is None  # every queue


def test_due_times_come_back_soonest_first_each_a_little_after_its_time():
    c = claimer()
    for when in (30.0, 10.0, 20.0):  # told in any order: the retries written, the runs enqueued for later
        c.due_at(when)
    assert c.next_due(now=0.0) == 10.01
    assert c.next_due(now=10.02) == 20.01  # the passed one is gone, the later ones stay
    assert c.next_due(now=31.0) is None


def test_a_due_time_that_passed_counts_as_a_wake_up_until_a_claim_is_sent():
    c = claimer()
    c.due_at(5.0)
    c.next_due(now=4.0)
    assert c.limit(0, now=4.0, came_back=[Trip(limit=4, claimed=1)]) == 0  # before it: a short claim waits
    c.next_due(now=6.0)  # passed while a claim sent before it was under way: that claim may miss its run
    c.came_back([Trip(limit=4, claimed=1)])
    assert c.at_once(1, now=6.0)
    c.params(3, busy=1)
    c.came_back([Trip(limit=3, claimed=0)])  # sent a moment before the due time: short
    c.due_at(7.0)
    assert not c.at_once(1, now=7.0) and c.next_due(now=7.02) is None
    assert c.at_once(1, now=7.02)  # passed since: claim again now, not at the poll
    c.params(3, busy=1)
    c.came_back([Trip(limit=3, claimed=0)])
    assert not c.at_once(1, now=6.1)


def test_due_times_past_the_bound_are_left_to_the_poll():
    c = claimer()
    for when in range(1, 1002):
        c.due_at(float(when))
    assert len(c.due) == 1000 and c.next_due(now=0.0) == 1.01
