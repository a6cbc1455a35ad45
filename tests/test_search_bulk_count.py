"""A bulk action's count over an error search (web/runlist.py bulk_where, issue 55 item 3): the
search's runs are joined as a set, so the count reads those runs by id whatever else the history
holds. As `id = ANY(...)` beside the action's status condition, the planner ANDed thousands of ids
with the status index, which at 10,000,000 runs held 300,000 ended runs: 113 ms, past the count's
50 ms budget on every search page ("Retry at least 50 runs")."""

from sqlalchemy import func, select, text
from sqlalchemy.dialects import postgresql
from werkzeug.datastructures import MultiDict

from jobsweb.engine.runs.action_statements import CHANGES
from jobsweb.web import runlist

ENDED = ["failed", "dead", "cancelled"]


def test_a_searchs_retry_count_reads_its_runs_by_id_not_every_ended_run_through_the_status_index(app, sql):
    # A history as at 10,000,000 runs, smaller: 1,000,000 runs, 3 % dead with an error (a third
    # of them saying "upstream"), the others succeeded.
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', "
        "CASE WHEN n % 33 = 0 THEN 'dead' ELSE 'succeeded' END, CASE WHEN n % 33 = 0 THEN "
        "CASE WHEN n % 99 = 0 THEN 'refused by upstream ' ELSE 'timed out ' END || n END FROM generate_series(1, 1000000) n")
    sql("VACUUM ANALYZE job_runs")
    with app.test_request_context():
        run_filter = runlist.RunFilter.from_args(MultiDict({"q": "upstream"}))
        where = runlist.bulk_where(run_filter, ENDED)
        capped = select(runlist.JobRun.id).where(*where, text(CHANGES["retry"])).limit(10_001).subquery()
        statement = str(select(func.count()).select_from(capped).compile(
            dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})).replace("%%", "%")
    plan = [row[0].strip() for row in sql("EXPLAIN " + statement)]
    scans = [line.split("  (")[0] for line in plan if "Scan" in line]
    assert not any("Bitmap Index Scan on job_runs_status_id" in scan for scan in scans), scans
    assert sql(statement) == [(3334,)]
