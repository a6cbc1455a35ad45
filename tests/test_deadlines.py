"""core/deadlines.py: a round trip of jobsweb's own engine is cut past the bound of the thread
waiting on it, and only inside `bounded`; a team's engine never gets the bound."""

import time

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from jobsweb.core import deadlines
from jobsweb.core.database import db


def test_a_round_trip_past_its_bound_is_cut_and_its_connection_dropped_from_the_pool(app):
    with app.app_context():
        began = time.monotonic()
        with deadlines.bounded(0.5), pytest.raises(OperationalError, match=r"did not answer within 0\.5 s"):
            db.session.execute(db.select(db.func.pg_sleep(5))).all()
        took = time.monotonic() - began
        db.session.rollback()
        assert 0.5 <= took < 0.5 + 1.0
        # The pool dropped the cut connection: the next statement gets a working one.
        assert db.session.execute(db.select(db.func.pg_backend_pid())).scalar()


def test_outside_bounded_a_long_round_trip_is_never_cut(app):
    with app.app_context():
        with deadlines.bounded(0.2):
            db.session.execute(db.select(1)).all()
            db.session.rollback()
        db.session.execute(db.select(db.func.pg_sleep(0.6))).all()  # three times that bound, unbounded now


def test_after_a_cut_the_same_block_opens_no_connection_but_fails_at_once(app):
    with app.app_context():
        with deadlines.bounded(0.3):
            with pytest.raises(OperationalError):
                db.session.execute(db.select(db.func.pg_sleep(5))).all()
            db.session.rollback()
            db.engine.dispose()
            began = time.monotonic()
            with pytest.raises(OperationalError, match="did not answer"):
                db.session.execute(db.select(1)).all()
            # At once: not after a connect's 3 s timeout (CONNECT_TIMEOUT), with room for a loaded machine.
            assert time.monotonic() - began < 2.0
            db.session.rollback()


def test_jobsweb_engine_opens_bounded_connections_with_a_connect_timeout(app):
    with app.app_context():
        raw = db.engine.raw_connection()
        try:
            conn = raw.driver_connection
            assert isinstance(conn, deadlines.BoundedConnection)
            assert conn.info.get_parameters()["connect_timeout"] == str(deadlines.CONNECT_TIMEOUT)
        finally:
            raw.close()
    assert issubclass(deadlines.BoundedConnection, psycopg.Connection)
