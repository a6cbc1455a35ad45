"""Every count and list of the runs page has a plan that does not depend on the statistics' luck
(issue 53, M3 and L1): the status chips and a status or job type filter read their index
whatever number of statuses the statistics saw, and the filters no index serves are bounded."""

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import postgresql
from werkzeug.datastructures import MultiDict

from jobsweb.core.models import JobRun
from jobsweb.engine.statements import RUN_STATUSES
from jobsweb.ops import stats
from jobsweb.web import runlist, search_limits

PRESENT = ("succeeded", "dead", "failed")


@pytest.fixture
def status_statistics(sql):
    """make(k): 60,000 runs of the first k of PRESENT, analysed after a tenth of them changed (no
    page all-visible), and the column's n_distinct set to k as well; reset afterwards."""

    def make(k):
        sql("TRUNCATE job_runs CASCADE")
        sql("INSERT INTO job_runs (job_type, status) SELECT 'jobsweb.noop', (CAST(%(present)s AS text[]))[1 + n %% %(k)s] "
            "FROM generate_series(1, 60000) n", {"present": list(PRESENT[:k]), "k": k})
        sql("VACUUM ANALYZE job_runs")
        sql("UPDATE job_runs SET progress_note = 'x' WHERE id % 10 = 0")
        sql(f"ALTER TABLE job_runs ALTER COLUMN status SET (n_distinct = {k})")
        sql("ANALYZE job_runs")
        return PRESENT[:k]

    yield make
    sql("ALTER TABLE job_runs ALTER COLUMN status RESET (n_distinct)")


def plan_of(sql, statement):
    return "\n".join(row[0] for row in sql("EXPLAIN " + statement))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_status_chips_never_walk_the_table_for_a_status_whatever_the_statistics_saw(status_statistics, sql, k):
    present = status_statistics(k)
    for status in RUN_STATUSES:
        plan = plan_of(sql, stats.capped_counts([status]))
        assert "Seq Scan" not in plan, (status, plan)
        if status not in present:
            # Not the primary key walked for 10,001 runs that are not there: the whole table
            # (13.2 s per absent status at 1.3M runs).
            assert "job_runs_pkey" not in plan, (k, status, plan)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_status_or_job_type_filter_reads_its_index_for_a_value_absent_whatever_the_statistics_saw(
        app, status_statistics, sql, k):
    """jobsweb's own engine never prepares a statement (core/database.py), so each page is planned
    for its values: the plan read here, with the values written in, is the page's."""
    present = status_statistics(k)
    with app.test_request_context():
        for args in [{"status": status} for status in RUN_STATUSES if status not in present] + [
                {"job_type": "nothing.here"}, {"status": "dead", "job_type": "nothing.here"}]:
            run_filter = runlist.RunFilter.from_args(MultiDict(args))
            newest = select(JobRun.id).where(*run_filter.conditions()).order_by(JobRun.id.desc()).limit(51)
            statement = str(newest.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
            plan = plan_of(sql, statement.replace("%%", "%"))
            assert "job_runs_pkey" not in plan and "Seq Scan" not in plan, (k, args, plan)


def test_a_reversed_time_range_is_refused_naming_its_fields(sign_in):
    client = sign_in("viewer")
    response = client.get("/runs", query_string={"since": "2026-05-02T10:00", "until": "2026-05-01T10:00"})
    html = response.get_data(as_text=True)
    assert response.status_code == 400
    assert "since (2026-05-02T10:00) is not before until (2026-05-01T10:00)" in html


@pytest.mark.parametrize("args", [{"queue": "reports"}, {"priority": "3"}, {"worker": "host:1"},
                                  {"q": "timeout"}])
def test_a_filter_no_index_serves_takes_the_searchs_limits(sign_in, sql, args):
    viewer = sign_in("viewer")
    # The viewer's other such read, still running: its lock, held by another connection.
    sql("SELECT pg_advisory_lock(%s, hashtext('viewer@example.com'))", [search_limits.PERSON_LOCKS])
    try:
        busy = viewer.get("/runs", query_string=args)
        assert busy.status_code == 429 and "Search busy" in busy.get_data(as_text=True), args
        assert viewer.get("/runs", query_string={"job_type": "reports.weekly"}).status_code == 200
    finally:
        sql("SELECT pg_advisory_unlock_all()")
    assert viewer.get("/runs", query_string=args).status_code == 200
