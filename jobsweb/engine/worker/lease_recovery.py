"""Lease recovery: the attempts of runs whose worker stopped heartbeating (killed, crashed,
frozen) are recorded as failed, so those runs retry or die instead of staying `running`; a run it
held ahead of a free slot whose handler never began is given back uncharged instead.

A duty of every worker, handed to it by the command that builds it, like Oban's Lifeline.
"""

import logging

import psycopg

from .. import statements, upkeep
from ..jobs import registry
from ..jobs.registry import JobContext
from .duties import Duty
from .execution import Failures, released
from .outcome_writes import finish_each, finish_params, log_finished

log = logging.getLogger("jobsweb.worker")

RECOVER_BATCH = 100  # expired leases recovered per statement
# Claims in a row (job_runs.unbegun_claims, 0032_unbegun_claims) that may hold a run ahead of a free
# slot and lose it with their worker, its handler not known to have begun, before lease recovery
# charges the attempt as ever. The worker says a run began on its next round trip, not as the
# handler starts (a round trip per run would cost more than the run): a handler that kills its
# worker (a segfault, the OOM killer) in between would otherwise be run again uncharged for ever.
# Past the bound such a loss costs an attempt again: the run still ends dead, after at most
# UNBEGUN_CLAIMS + 1 losses an attempt.
UNBEGUN_CLAIMS = 3


def recover_expired_leases(link, failures, limit=RECOVER_BATCH):
    """Fail the attempts of up to `limit` runs whose lease ran out; returns how many.

    EXPIRED_LEASES locks them (SKIP LOCKED: one recoverer per run) and FINISH_RUNS, guarded by
    the dead holder and the attempt, finishes them in the same transaction. A run its claim held
    ahead whose handler never began (unbegun_claims 1 to UNBEGUN_CLAIMS) is released, as a stopping
    worker releases it: queued again at its run_at, no attempt recorded, the claim's given back.
    """

    def recover(conn):
        rows = conn.execute(upkeep.EXPIRED_LEASES, {"limit": limit}).fetchall()
        outcomes = []
        for run_id, attempt, holder, job_type, backoff_base, backoff_cap, unbegun_claims in rows:
            if 0 < unbegun_claims <= UNBEGUN_CLAIMS:
                outcomes.append(released(run_id, job_type, attempt, holder))
                continue
            ctx = JobContext(run_id, job_type, {}, attempt, 0)
            # The dead holder is the one FINISH_RUNS's guard expects.
            outcomes.append(failures.failed(holder, registry.get(job_type), ctx, "lease_expired",
                                            f"lease expired: no heartbeat from worker {holder} within the lease "
                                            "(it stopped or crashed, or could not reach the database in time)",
                                            backoff=(backoff_base, backoff_cap)))
        if unbegun := sum(o.outcome == "released" for o in outcomes):
            # Each is also logged "released back to the queue unstarted" as FINISH_RUNS writes it.
            log.info("lease recovery: %d of %d run(s) whose lease expired were held ahead of a free slot and "
                     "never began: released, no attempt charged", unbegun, len(outcomes))
        if outcomes:
            try:
                with conn.transaction():  # a savepoint: its failure leaves the locks taken above
                    rows = conn.execute(statements.FINISH_RUNS, finish_params(outcomes)).fetchall()
                log_finished(outcomes, rows)
            except psycopg.OperationalError:
                raise
            except psycopg.Error:
                # One outcome the database cannot store must not block recovering the others.
                finish_each(lambda sql, params: _in_savepoint(conn, sql, params), outcomes)
        return len(outcomes)

    return link.in_transaction(recover)


def _in_savepoint(conn, sql, params):
    with conn.transaction():
        return conn.execute(sql, params).fetchall()


def duty(config):
    """Recover expired leases as often as a worker heartbeats (a third of the lease), and batch
    after batch while there are more: a busy worker killed outright held thousands of runs
    (claimed ahead, engine/worker/claim_ahead.py), which at one batch a heartbeat took minutes."""
    failures = Failures.from_config(config)
    return Duty("lease recovery", lambda link: recover_expired_leases(link, failures) > 0,
                every=config["JOBSWEB_LEASE_SECONDS"] / 3, after_work=0)
