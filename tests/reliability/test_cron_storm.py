"""Drill 4, cron storm: four `flask run-jobs` started in the same second, round after round,
with 50 due definitions: every slot is materialised exactly once."""

from jobsweb.scheduling.definitions import define
from tests.conftest import committed
from tests.processes import finish
from tests.reliability.conftest import size

DEFINITIONS = 50
PROCESSES = 4


def test_four_cron_ticks_at_once_materialise_each_slot_exactly_once(app, sql, spawn_worker, worker_log, figures):
    rounds = size("STORM_ROUNDS", 3)
    with committed(app):
        for n in range(DEFINITIONS):
            # A schedule whose own next slot is years away: each round's stand-in slot is then
            # the only one due. Hourly, a round that crossed the hour (busy run 25: 06:59:58.8 set,
            # ticked at 07:00:00.4) also had 07:00 due, and its misfire policy skipped the stand-in.
            define(f"report-{n}", "jobsweb.noop", "0 0 29 2 *", overlap="allow")
    conflicts = 0
    for _ in range(rounds):
        # Stand-in for a slot coming due: every definition's slot is due now, a new slot each round.
        sql("UPDATE job_definitions SET next_run_at = clock_timestamp() - interval '1 second'")
        ticks = [spawn_worker("--poll-interval", "0.05", output=worker_log()) for _ in range(PROCESSES)]
        for code, output in [finish(proc, timeout=120) for proc in ticks]:
            assert code == 0 and "Traceback" not in output and " ERROR " not in output, output
            conflicts += output.count("already exists; not created again")

    assert sql("SELECT count(*), count(DISTINCT (definition_id, scheduled_for)) FROM job_runs") == [
        (DEFINITIONS * rounds, DEFINITIONS * rounds)]
    assert sql("SELECT count(DISTINCT definition_id), min(n), max(n) FROM "
               "(SELECT definition_id, count(*) AS n FROM job_runs GROUP BY definition_id) d") == [
        (DEFINITIONS, rounds, rounds)]
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", DEFINITIONS * rounds)]
    [(slots, distinct_slots)] = sql("SELECT count(*), count(DISTINCT (definition_id, scheduled_for)) FROM job_runs")
    figures(rounds=rounds, processes_per_round=PROCESSES, definitions=DEFINITIONS,
            slots=slots, duplicated_slots=slots - distinct_slots, missing_slots=DEFINITIONS * rounds - distinct_slots,
            slot_inserts_refused_by_the_unique_slot=conflicts)
