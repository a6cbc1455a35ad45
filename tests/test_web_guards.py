"""Issue 16 on the admin screen: bad query strings and ids are 4xx, every answer carries the
security headers, no inline script, request size limited to jobsweb's blueprint."""

import io
import re

import pytest
from flask import Flask

from jobsweb.extension import JobsWeb
from tests.conftest import csrf_token


@pytest.mark.parametrize("path", ["/runs?q=%00", "/runs?job_type=a%00", "/runs?worker=%00", "/definitions?q=%00",
                                  "/definitions?job_type=%00", "/runs?q=a%0d%0ab"])
def test_a_control_character_in_a_query_string_is_a_400_naming_the_field(sign_in, path):
    response = sign_in("viewer").get(path)
    assert response.status_code == 400
    field = re.search(r"\?(\w+)=", path).group(1)
    assert f"{field}: must not contain the control character" in response.get_data(as_text=True)


@pytest.mark.parametrize("path", ["/runs?before=%C2%B2", "/runs?definition=%C2%B2", "/definitions/1?before=%C2%B2",
                                  f"/runs?before={2**63}", "/runs?before=-1"])
def test_digits_int_cannot_read_and_numbers_past_bigint_are_a_400(app, sign_in, path):
    from tests.conftest import define as define_committed

    define_committed(app, "nightly")
    assert sign_in("viewer").get(path).status_code == 400


@pytest.mark.parametrize("path", [f"/runs/{2**63}", f"/definitions/{2**64}", f"/definitions/{2**63}/edit"])
def test_an_id_past_bigint_in_a_url_is_a_404(sign_in, path):
    assert sign_in("admin").get(path).status_code == 404


def test_bulk_ids_that_int_cannot_read_are_a_400_and_change_nothing(sign_in, sql):
    sql("INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', 'dead')")
    client = sign_in("operator")
    for ids in (["1", "²"], [str(2**63)], ["1\x00"]):
        response = client.post("/runs/bulk", data={"action": "retry", "ids": ids, "csrf_token": csrf_token(client, "/")})
        assert response.status_code == 400
    assert sql("SELECT status FROM job_runs") == [("dead",)]


@pytest.mark.parametrize("field, value", [("email", "a\x00@example.com"), ("password", "pass\x00word")])
def test_nul_in_the_sign_in_form_is_an_error_in_place_not_a_500(client, field, value):
    data = {"email": "a@example.com", "password": "correct horse battery", field: value}
    response = client.post("/sign-in", data={**data, "csrf_token": csrf_token(client)})
    assert response.status_code == 422
    assert "must not contain the control character" in response.get_data(as_text=True)


def test_nul_in_the_forms_fields_is_refused_in_place(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    enqueue = client.post("/enqueue", data={"job_type": "jobsweb.noop", "payload": "{}", "idempotency_key": "k\x00",
                                            "csrf_token": token})
    definition = client.post("/definitions/new", data={
        "name": "a\x00b", "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC", "payload": "{}",
        "overlap": "skip", "misfire": "latest", "grace_seconds": "300", "alert_webhook_url": "https://x.example/\x00",
        "csrf_token": token})
    user = client.post("/users", data={"email": "b\x00@example.com", "role": "viewer",
                                       "password": "a long unusual passphrase", "csrf_token": token})
    assert (enqueue.status_code, definition.status_code, user.status_code) == (422, 422, 422)
    assert "must not contain the control character" in definition.get_data(as_text=True)
    assert sql("SELECT (SELECT count(*) FROM job_runs), (SELECT count(*) FROM job_definitions), "
               "(SELECT count(*) FROM jobsweb_users)") == [(0, 0, 1)]


@pytest.mark.parametrize("character, words", [("\u202e", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
                                              ("\u2067", "U+2067 (RIGHT-TO-LEFT ISOLATE)"),
                                              ("\x9b", "U+009B (a C1 control character)")])
def test_bidi_overrides_and_c1_controls_are_refused_in_names_naming_the_field(sign_in, runner, sql, registry_snapshot,
                                                                              character, words):
    from jobsweb import job
    from jobsweb.core.errors import InvalidInput

    client = sign_in("admin")
    token = csrf_token(client, "/")
    definition = client.post("/definitions/new", data={
        "name": f"backup{character}gpj.exe", "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC",
        "payload": "{}", "overlap": "skip", "misfire": "latest", "grace_seconds": "300", "csrf_token": token})
    assert definition.status_code == 422
    assert f"must not contain {words}" in definition.get_data(as_text=True)  # beside the name field
    user = runner.invoke(args=["users", "create", f"ann{character}@example.com", "--password", "a long unusual passphrase"])
    assert user.exit_code == 2 and f"email: must not contain {words}" in user.output
    pause = runner.invoke(args=["jobs", "pause-type", f"mail{character}"])
    assert pause.exit_code == 2 and f"job_type: must not contain {words}" in pause.output
    with pytest.raises(InvalidInput, match="name: must not contain"):
        job(f"send{character}")(lambda ctx: None)
    assert sql("SELECT (SELECT count(*) FROM job_definitions), (SELECT count(*) FROM jobsweb_users), "
               "(SELECT count(*) FROM job_paused_types)") == [(0, 1, 0)]


def test_a_line_break_in_next_does_not_reach_the_location_header(client, make_user):
    email = make_user("viewer")
    response = client.post("/sign-in?next=/runs%0d%0aSet-Cookie:%20x=1", data={
        "email": email, "password": "correct horse battery", "csrf_token": csrf_token(client)})
    assert response.status_code == 400 and "Set-Cookie" not in response.headers
    response = client.post("/sign-in?next=/%5Cevil.example", data={
        "email": email, "password": "correct horse battery", "csrf_token": csrf_token(client)})
    assert response.status_code == 302 and response.headers["Location"] == "/"


@pytest.mark.parametrize("path", ["/sign-in", "/runs", "/no-such-page-at-all", "/runs/999"])
def test_every_answer_carries_the_security_headers(sign_in, path):
    response = sign_in("viewer").get(path)
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"


def test_no_page_has_inline_script_or_event_handler(app, sign_in, sql):
    from tests.conftest import define as define_committed

    define_committed(app, "nightly")
    sql("INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', 'dead')")
    client = sign_in("admin")
    for path in ("/", "/runs", "/runs/1", "/definitions", "/definitions/1", "/definitions/1/edit",
                 "/definitions/new", "/definitions/1/delete", "/enqueue", "/users", "/workers", "/incidents"):
        html = client.get(path).get_data(as_text=True)
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert not re.search(r"\son[a-z]+=", html), path
    assert 'data-confirm="Retry 1 run (failed, dead or cancelled)' in client.get("/runs").get_data(as_text=True)


def test_a_request_over_the_limit_is_a_413_before_it_is_parsed(client):
    response = client.post("/sign-in", data={"email": "x" * (2 * 1024 * 1024)})
    assert response.status_code == 413


def test_a_chunked_request_without_a_length_is_cut_at_the_limit_with_a_413(client):
    # No Content-Length (chunked, as gunicorn passes it on): only the cap on the input stops it.
    big = b"email=" + b"x" * (2 * 1024 * 1024)
    response = client.post("/sign-in", input_stream=io.BytesIO(big), content_type="application/x-www-form-urlencoded",
                           environ_overrides={"wsgi.input_terminated": True})
    assert response.status_code == 413


def test_inside_a_host_app_the_limit_and_headers_are_jobswebs_only(database_url_for_tests):
    host = Flask("host")
    host.config.update(SQLALCHEMY_DATABASE_URI=database_url_for_tests, SECRET_KEY="host-secret", TESTING=True)

    @host.post("/upload")
    def upload():
        return str(len(host_request().get_data()))

    def host_request():
        from flask import request
        return request

    JobsWeb(host, url_prefix="/admin/jobs")
    assert host.config.get("MAX_CONTENT_LENGTH") is None
    client = host.test_client()
    big = b"x" * (2 * 1024 * 1024)
    answer = client.post("/upload", data=big)
    assert answer.status_code == 200 and "Content-Security-Policy" not in answer.headers
    assert client.post("/admin/jobs/sign-in", data=big).status_code == 413


def test_the_edit_form_masks_secrets_and_saving_keeps_them(app, sign_in, sql):
    from tests.conftest import define as define_committed

    define_committed(app, "nightly", payload={"db_dsn": "postgresql://u:pw@db/x", "Authorization": "Bearer abc",
                                              "batch": 5})
    client = sign_in("admin")
    html = client.get("/definitions/1/edit").get_data(as_text=True)
    assert "pw@db" not in html and "Bearer abc" not in html and "&#34;batch&#34;: 5" in html
    payload = re.search(r'<textarea[^>]*name="payload"[^>]*>\s*(.*?)</textarea>', html, re.S).group(1)
    import html as html_lib

    edited = html_lib.unescape(payload).replace('"batch": 5', '"batch": 6')
    response = client.post("/definitions/1/edit", data={
        "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC", "payload": edited, "overlap": "skip",
        "misfire": "latest", "grace_seconds": "300", "csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302, response.get_data(as_text=True)
    assert sql("SELECT payload FROM job_definitions") == [(
        {"db_dsn": "postgresql://u:pw@db/x", "Authorization": "Bearer abc", "batch": 6},)]


@pytest.mark.parametrize("key", ["Authorization", "credentials", "private_key", "pwd", "dsn", "cookie", "session_id"])
def test_more_secret_looking_keys_are_masked_by_default(app, key):
    from jobsweb.web.rendering import MASK, mask_secrets

    assert mask_secrets({key: "s3cret"}, app.config["JOBSWEB_MASK_KEYS"]) == {key: MASK}


@pytest.mark.parametrize("key", ["passphrase", "aws_access_key", "AccessKeyId", "auth", "basic_auth", "bearer",
                                 "BearerToken", "signature", "webhook_signature"])
def test_passphrases_access_keys_auth_bearer_and_signatures_are_masked_by_default(app, key):
    from jobsweb.web.rendering import MASK, mask_secrets

    assert mask_secrets({key: "s3cret"}, app.config["JOBSWEB_MASK_KEYS"]) == {key: MASK}
