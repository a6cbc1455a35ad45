import socket

from jobsweb import create_app
from jobsweb.ops.health import Probe


def closed_port():
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthz_is_ok_without_sign_in_when_the_schema_is_at_the_head(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_healthz_is_503_when_the_database_does_not_answer(database_url_for_tests):
    app = create_app({"SQLALCHEMY_DATABASE_URI": f"postgresql+psycopg://jobsweb@127.0.0.1:{closed_port()}/x",
                      "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.get_json() == {"status": "unavailable", "reason": "database"}  # the words: test_health_words


def test_healthz_is_503_naming_both_revisions_when_the_schema_is_behind(scratch_database):
    url = scratch_database("jobsweb_health_behind", revision="0002_schedules")
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    response = app.test_client().get("/healthz")
    assert (response.status_code, response.get_json()["reason"]) == (503, "schema")  # to anyone: test_health_words
    reason = Probe(app, 5).problem(5)  # the words, for the log and signed-in viewers
    assert reason.startswith("database schema is at 0002_schedules, the code expects ")
    assert reason.endswith("run `flask jobs migrate`")


def test_healthz_is_503_when_the_database_was_never_migrated(scratch_database):
    url = scratch_database("jobsweb_health_empty", revision=None)
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    response = app.test_client().get("/healthz")
    assert (response.status_code, response.get_json()["reason"]) == (503, "schema")
    assert Probe(app, 5).problem(5) == "database schema is not migrated: run `flask jobs migrate`"


def test_healthz_recovers_once_the_schema_is_upgraded(scratch_database):
    from flask_migrate import upgrade

    url = scratch_database("jobsweb_health_upgrade", revision="0003_admin")
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    client = app.test_client()
    assert client.get("/healthz").status_code == 503
    with app.app_context():
        upgrade()
    assert client.get("/healthz").status_code == 200


def test_healthz_stays_ok_when_a_deploy_migrated_past_this_older_code(app, sql):
    [(head,)] = sql("SELECT version_num FROM jobsweb_alembic_version")
    sql("UPDATE jobsweb_alembic_version SET version_num = '0099_from_newer_code'")
    try:
        assert app.test_client().get("/healthz").status_code == 200
    finally:
        sql("UPDATE jobsweb_alembic_version SET version_num = %s", [head])


def test_healthz_is_503_naming_a_dropped_function_at_the_next_probe_and_200_once_migrate_recreated_it(
        scratch_database):
    import psycopg

    from jobsweb.core.database import libpq_url

    url = scratch_database("jobsweb_health_incomplete")
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    with psycopg.connect(libpq_url(url)) as conn:  # as a restore of the tables alone leaves it
        conn.execute("DROP FUNCTION jobsweb_claim_runs_in_order")  # its caller's SQL body is not a dependency
    response = client.get("/healthz")  # the very next probe: nothing cached
    assert (response.status_code, response.get_json()) == (503, {"status": "unavailable", "reason": "schema"})
    assert Probe(app, 5).problem(5) == (
        "jobsweb's schema at 0034_worker_stop is incomplete, missing function "
        "jobsweb_claim_runs_in_order(text,double precision,text[],integer,integer,text[]): run `flask jobs migrate` "
        "(it recreates functions and triggers; tables and indexes come back with a restore of jobsweb's tables)")
    assert app.test_cli_runner().invoke(args=["jobs", "migrate"]).exit_code == 0
    assert client.get("/healthz").status_code == 200
