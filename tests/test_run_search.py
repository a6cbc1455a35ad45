"""The runs list's error text search (web/runlist.py): it reads the runs that have an error,
through index job_runs_errored (migration 0022), however many runs succeeded."""

from sqlalchemy import select
from sqlalchemy.dialects import postgresql
from werkzeug.datastructures import MultiDict

from jobsweb.core.models import JobRun
from jobsweb.web import runlist


def test_a_search_reads_only_the_runs_that_have_an_error_newest_first(app, sql):
    # A hundred thousand runs, one in a hundred dead with an error, the others succeeded.
    sql("INSERT INTO job_runs (job_type, status, last_error) "
        "SELECT 'jobsweb.noop', CASE WHEN n % 100 = 0 THEN 'dead' ELSE 'succeeded' END, "
        "CASE WHEN n % 100 = 0 THEN 'connection refused by upstream ' || n END FROM generate_series(1, 100000) n")
    # A tenth of the runs changed since, as on a busy table: no page is all-visible.
    sql("VACUUM ANALYZE job_runs")
    sql("UPDATE job_runs SET progress_note = 'x' WHERE id % 10 = 0")
    sql("ANALYZE job_runs")
    with app.test_request_context():
        for text, expected in (("says nothing like this", []), ("upstream 9990", [99900]), ("UPSTREAM 100000", [100000])):
            run_filter = runlist.RunFilter.from_args(MultiDict({"q": text}))
            newest = select(JobRun.id).where(*run_filter.conditions()).order_by(JobRun.id.desc()).limit(51)
            statement = str(newest.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
            plan = "\n".join(row[0] for row in sql("EXPLAIN " + statement.replace("%%", "%")))
            # Not the primary key walked newest first until 51 runs match: for a text no error
            # says, that read every run.
            assert "using job_runs_errored" in plan and "job_runs_pkey" not in plan, plan
            assert [row[0] for row in sql(statement.replace("%%", "%"))] == expected
