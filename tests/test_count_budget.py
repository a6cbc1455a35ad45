"""A count read within a budget (run_actions.within_budget: the runs page's status chips, a bulk
action's confirmation): past the budget it says None, and the page's own limit holds again for
every statement after the read, the savepoint's ROLLBACK TO among them. That statement ran under
the 10 ms budget, and on a loaded server it was stopped too: a 503 for the whole runs page."""

from psycopg.pq import TransactionStatus
from sqlalchemy import event, func, select, text

from jobsweb.core.database import db
from jobsweb.core.models import JobRun
from jobsweb.engine.runs.run_actions import within_budget

PAGE_LIMIT = "SELECT set_config('statement_timeout', '4500', true)"


def limits_of_rollbacks_to(connection):
    """The statement_timeout each ROLLBACK TO SAVEPOINT of `connection` starts with, "aborted" for
    one in a subtransaction an error aborted (whose abort set its settings back)."""
    seen = []

    def before(conn, cursor, statement, parameters, context, executemany):
        if not statement.startswith("ROLLBACK TO SAVEPOINT"):
            return
        if cursor.connection.info.transaction_status == TransactionStatus.INERROR:
            seen.append("aborted")
        else:
            cursor.execute("SHOW statement_timeout")  # on the same session, just before it
            seen.append(cursor.fetchone()[0])

    event.listen(connection, "before_cursor_execute", before)
    return seen


def test_a_count_within_its_budget_leaves_the_pages_limit_to_the_rollback_after_it(app, sql):
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 3)")
    with app.app_context():
        db.session.execute(text(PAGE_LIMIT))
        seen = limits_of_rollbacks_to(db.session.connection())
        assert within_budget(select(func.count()).select_from(JobRun), 0.05) == 3
        assert seen == ["4500ms"]
        assert db.session.execute(text("SHOW statement_timeout")).scalar() == "4500ms"
        db.session.rollback()


def test_a_count_past_its_budget_says_none_and_leaves_the_transaction_and_its_limit_as_they_were(app, sql):
    with app.app_context():
        db.session.execute(text(PAGE_LIMIT))
        seen = limits_of_rollbacks_to(db.session.connection())
        assert within_budget(select(func.pg_sleep(0.2)), 0.01) is None
        assert seen == ["aborted"]
        assert db.session.execute(text("SELECT current_setting('statement_timeout'), 1")).one() == ("4500ms", 1)
        db.session.rollback()
