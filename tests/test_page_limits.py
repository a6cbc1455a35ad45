"""Page reads stop on the server (issue 53, M3): every statement of a request of the admin screen
runs under a statement_timeout a little under the request's own round-trip bound (web/guards.py
limit_statements), so a read the client gives up on does not go on in PostgreSQL."""

import time

import psycopg
import pytest
from sqlalchemy import text

from jobsweb.core.database import libpq_url
from jobsweb.web import guards


@pytest.fixture
def locked_runs(database_url_for_tests):
    """job_runs locked by another transaction: every read of it waits until the lock goes."""
    with psycopg.connect(libpq_url(database_url_for_tests)) as conn:
        conn.execute("LOCK TABLE job_runs IN ACCESS EXCLUSIVE MODE")
        yield conn
        conn.rollback()


def waiting_backends(sql):
    return sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()")[0][0]


def test_a_page_read_past_its_limit_is_stopped_by_the_server_with_a_page_saying_so(sign_in, sql, monkeypatch,
                                                                                   locked_runs):
    client = sign_in("viewer")
    # 300 ms instead of 4.5 s: the client's own bound (5 s) would cut the read first without it.
    monkeypatch.setattr(guards, "PAGE_LIMIT_MS", 300)
    started = time.monotonic()
    response = client.get("/runs")
    took = time.monotonic() - started
    html = response.get_data(as_text=True)
    assert response.status_code == 503 and "Took too long" in html and "the database stopped it" in html, html
    assert response.headers["Retry-After"] == "5" and "Traceback" not in html
    assert took < 3, took
    # Stopped on the server: no backend is still waiting for the lock on its behalf.
    assert waiting_backends(sql) == 0


def test_every_transaction_of_a_page_is_limited_and_a_hosts_own_routes_are_not(app, sign_in):
    from jobsweb.core.database import db

    @app.get("/host-timeout")
    def host_timeout():
        return db.session.execute(text("SHOW statement_timeout")).scalar()

    assert app.test_client().get("/host-timeout").get_data(as_text=True) == "0"
    assert guards.PAGE_LIMIT_MS == 4500  # a little under outage.ROUND_TRIP_LIMIT, 5 s
    with app.test_request_context("/runs"):
        from jobsweb.web import outage

        outage.bound_waits()
        try:
            assert db.session.execute(text("SHOW statement_timeout")).scalar() == "4500ms"
            db.session.commit()  # the next transaction (a bulk action's next batch) is limited again
            assert db.session.execute(text("SHOW statement_timeout")).scalar() == "4500ms"
        finally:
            outage.end_bounds()
