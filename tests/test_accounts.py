"""No password is hashed or checked inside a transaction (web/accounts.py). create_user read the
email's row, then spent scrypt's time on the hash, then inserted: on a starved CPU the hash
outlasted a 10 s idle_in_transaction_session_timeout and PostgreSQL ended the session."""

from unittest import mock

import psycopg
import pytest
from werkzeug.security import check_password_hash, generate_password_hash

from jobsweb import create_app
from jobsweb.core.database import db, libpq_url
from jobsweb.web import accounts
from tests.conftest import PASSWORD, SECRET_KEY, csrf_token

IN_TRANSACTION = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                  "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()")


@pytest.fixture
def hashing(scratch_database):
    """(app, hashes): an app on a database of its own; `hashes` lists, for each hash made or
    checked, the sessions of that database idle in a transaction as it began. Read as the hash
    begins, not left to an idle_in_transaction_session_timeout to show: a timeout short enough
    for a test also ends, on a loaded machine, a session merely slow between two statements (a
    fresh-clone make test at load 15 met it at 300 ms)."""
    url = scratch_database("accounts_idle")
    observer = psycopg.connect(libpq_url(url), autocommit=True)
    hashes = []

    def made(password):
        hashes.append(("made", observer.execute(IN_TRANSACTION).fetchone()[0]))
        return generate_password_hash(password)

    def checked(stored, password):
        hashes.append(("checked", observer.execute(IN_TRANSACTION).fetchone()[0]))
        return check_password_hash(stored, password)

    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET_KEY})
    accounts._dummy_hash()  # made at its usual cost, once per process: other tests check against it
    with (mock.patch.object(accounts, "generate_password_hash", made),
          mock.patch.object(accounts, "check_password_hash", checked)):
        yield app, hashes
    with app.app_context():
        db.engine.dispose()
    observer.close()


def sign_in(client, email, password):
    return client.post("/sign-in", data={"email": email, "password": password, "csrf_token": csrf_token(client)})


def test_no_password_is_hashed_or_checked_while_a_session_of_the_app_is_in_a_transaction(hashing):
    app, hashes = hashing
    with app.app_context():  # `flask dev`'s first start: the demo admin
        assert accounts.ensure_demo_admin()[0] == "admin@example.com"
        db.session.commit()
    runner = app.test_cli_runner()
    created = runner.invoke(args=["users", "create", "ann@example.com", "--role", "admin", "--password", PASSWORD])
    assert (created.exit_code, created.output) == (0, "created admin ann@example.com\n")

    ann = app.test_client()
    assert sign_in(ann, "ann@example.com", PASSWORD).status_code == 302
    assert sign_in(app.test_client(), "nobody@example.com", PASSWORD).status_code == 401  # the dummy hash
    added = ann.post("/users", data={"csrf_token": csrf_token(ann, "/"), "email": "bob@example.com",
                                     "role": "viewer", "password": PASSWORD})
    assert added.status_code == 302, added.get_data(as_text=True)
    with app.app_context():
        bob = accounts.find_user("bob@example.com").id
        db.session.rollback()
    reset = ann.post(f"/users/{bob}/password", data={"csrf_token": csrf_token(ann, "/"),
                                                     "password": "another long passphrase"})
    assert reset.status_code == 302, reset.get_data(as_text=True)
    reset = runner.invoke(args=["users", "reset-password", "bob@example.com", "--password", "a third long passphrase"])
    assert (reset.exit_code, reset.output) == (0, "new password set for bob@example.com; their sessions have ended\n")

    # The demo admin, ann (CLI), ann signs in, an unknown email, bob (page), bob's new password
    # (page, then CLI): no session of the database was in a transaction as any began.
    assert hashes == [("made", 0), ("made", 0), ("checked", 0), ("checked", 0), ("made", 0), ("made", 0),
                      ("made", 0)]
