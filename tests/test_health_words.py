"""/healthz tells a caller who has not signed in only ok, database or schema (issue 53, item 5):
the schema's revisions and the names of what it lacks go to the log, once per change, and to a
signed-in viewer."""

import logging
import socket

import psycopg

from jobsweb import create_app
from jobsweb.core.database import db, libpq_url
from jobsweb.web import accounts
from tests.conftest import PASSWORD, csrf_token

SECRET = "0123456789abcdef-test-secret-key-0123456789-x"
MISSING = "missing function jobsweb_claim_runs_in_order(text,double precision,text[],integer,integer,text[])"


def scratch_app(url):
    return create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET})


def test_an_incomplete_schema_is_schema_to_anyone_and_named_to_a_signed_in_viewer_and_in_the_log_once(
        scratch_database, caplog):
    url = scratch_database("jobsweb_health_words")
    app = scratch_app(url)
    with app.app_context():
        accounts.create_user("viewer@example.com", PASSWORD, "viewer")
        db.session.commit()
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("DROP FUNCTION jobsweb_claim_runs_in_order")
    anonymous = app.test_client()
    with caplog.at_level(logging.INFO, logger="jobsweb.web"):
        first, second = anonymous.get("/healthz"), anonymous.get("/healthz")
    assert (first.status_code, first.get_json()) == (503, {"status": "unavailable", "reason": "schema"})
    assert (second.status_code, second.get_json()) == (503, {"status": "unavailable", "reason": "schema"})
    assert "jobsweb_claim_runs_in_order" not in first.get_data(as_text=True)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("health check:")]
    assert len(said) == 1 and MISSING in said[0] and said[0].startswith("health check: jobsweb's schema at ")

    signed_in = app.test_client()
    answer = signed_in.post("/sign-in", data={"email": "viewer@example.com", "password": PASSWORD,
                                              "csrf_token": csrf_token(signed_in)})
    assert answer.status_code == 302
    body = signed_in.get("/healthz").get_json()
    assert body["reason"] == "schema" and MISSING in body["detail"]

    assert app.test_cli_runner().invoke(args=["jobs", "migrate"]).exit_code == 0
    with caplog.at_level(logging.INFO, logger="jobsweb.web"):
        assert anonymous.get("/healthz").get_json() == {"status": "ok"}
    assert "health check: ok" in [r.getMessage() for r in caplog.records]


def test_a_schema_behind_the_code_names_no_revision_to_anyone(scratch_database):
    app = scratch_app(scratch_database("jobsweb_health_words_behind", revision="0002_schedules"))
    response = app.test_client().get("/healthz")
    assert (response.status_code, response.get_json()) == (503, {"status": "unavailable", "reason": "schema"})


def test_a_database_that_does_not_answer_is_database_and_its_words_are_in_the_log(caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    app = scratch_app(f"postgresql+psycopg://jobsweb@127.0.0.1:{port}/x")
    with caplog.at_level(logging.INFO, logger="jobsweb.web"):
        response = app.test_client().get("/healthz")
    assert (response.status_code, response.get_json()) == (503, {"status": "unavailable", "reason": "database"})
    assert ("health check: database unreachable (/healthz answers 503 until it passes)"
            in [r.getMessage() for r in caplog.records])
