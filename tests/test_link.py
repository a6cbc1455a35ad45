"""The engine's connection (engine/link.py): what it says when the database goes away."""

import pytest

from jobsweb.core.database import libpq_url
from jobsweb.engine.link import Link
from tests.conftest import wait_for


def test_a_connection_lost_mid_pipeline_is_named_by_what_broke_it_not_the_drivers_state(database_url_for_tests, sql):
    # A fast stop's first line was "database unavailable (cannot exit pipeline mode while busy)":
    # libpq's state after the break, raised by leaving the pipeline, not what broke it (issue 51).
    import psycopg as pg

    link = Link(libpq_url(database_url_for_tests))
    try:
        [(pid,)] = link.fetch("SELECT pg_backend_pid()")
        sql("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(lambda: not sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]), message="the backend to end")
        with pytest.raises(pg.OperationalError):
            link.conn.execute("SELECT 1")  # reads the server's FATAL, as the pipeline's statements did
        lost = link._lost(pg.OperationalError("cannot exit pipeline mode while busy"))
        assert "terminating connection due to administrator command" in str(lost), str(lost)
        assert link.conn is None
    finally:
        link.close()
