import pytest

from tests.conftest import PASSWORD, committed, csrf_token

PAGES = ["/", "/runs", "/workers", "/queues", "/definitions", "/enqueue", "/runs/1"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_redirects_to_sign_in_when_signed_out(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/sign-in")


def test_htmx_requests_when_signed_out_get_a_full_page_redirect(client):
    response = client.get("/runs", headers={"HX-Request": "true"})
    assert response.status_code == 401
    assert response.headers["HX-Redirect"].startswith("/sign-in")


def test_healthz_and_htmx_need_no_sign_in(client):
    assert client.get("/healthz").status_code == 200
    response = client.get("/vendor/htmx/htmx.min.js")
    assert response.status_code == 200
    assert b"htmx" in response.data[:2000]


def test_it_signs_in_with_the_right_password_and_goes_to_next(client, make_user):
    email = make_user("viewer", "Ann@Example.com")
    response = client.post("/sign-in?next=/workers", data={
        "email": "ann@example.com", "password": PASSWORD, "csrf_token": csrf_token(client)})
    assert response.status_code == 302 and response.headers["Location"] == "/workers"
    assert email in client.get("/").get_data(as_text=True)


def test_it_never_redirects_off_site_after_sign_in(client, make_user):
    make_user("viewer")
    response = client.post("/sign-in?next=//evil.example/x", data={
        "email": "viewer@example.com", "password": PASSWORD, "csrf_token": csrf_token(client)})
    assert response.headers["Location"] == "/"


def test_a_wrong_password_is_refused_with_one_message(client, make_user):
    make_user("viewer")
    response = client.post("/sign-in", data={
        "email": "viewer@example.com", "password": "nope", "csrf_token": csrf_token(client)})
    assert response.status_code == 401
    assert "do not match an account" in response.get_data(as_text=True)
    assert client.get("/").status_code == 302


def test_sign_in_without_a_csrf_token_is_refused(client, make_user):
    make_user("viewer")
    response = client.post("/sign-in", data={"email": "viewer@example.com", "password": PASSWORD})
    assert response.status_code == 400
    assert client.get("/").status_code == 302


def test_the_session_cookie_is_httponly_and_samesite(client, make_user):
    make_user("viewer")
    response = client.post("/sign-in", data={"email": "viewer@example.com", "password": PASSWORD,
                                              "csrf_token": csrf_token(client)})
    cookies = {c.partition("=")[0]: c for c in response.headers.getlist("Set-Cookie")}
    assert "HttpOnly" in cookies["session"] and "SameSite=Lax" in cookies["session"] and "Secure" not in cookies["session"]
    # The sign-in limits' device cookie (web/throttle.py): sent back to the sign-in page only.
    device = cookies["jobsweb_device"]
    assert "HttpOnly" in device and "SameSite=Strict" in device and "Path=/sign-in" in device and "Secure" not in device


def test_the_session_cookie_is_secure_over_https(app, make_user):
    make_user("viewer")
    client = app.test_client()
    token = csrf_token(client)
    # Over HTTPS Flask-WTF also checks that the Referer is this site.
    response = client.post("/sign-in", base_url="https://localhost",
                           headers={"Referer": "https://localhost/sign-in"}, data={
        "email": "viewer@example.com", "password": PASSWORD, "csrf_token": token})
    assert [("Secure" in c) for c in response.headers.getlist("Set-Cookie")] == [True, True]


def test_sign_out_needs_a_post_with_the_token(sign_in):
    client = sign_in("viewer")
    assert client.post("/sign-out").status_code == 400
    assert client.post("/sign-out", data={"csrf_token": csrf_token(client, "/")}).status_code == 302
    assert client.get("/").status_code == 302


def test_users_create_makes_a_user_who_can_sign_in(runner, client):
    result = runner.invoke(args=["users", "create", "ops@example.com", "--role", "admin",
                                 "--password", PASSWORD])
    assert result.exit_code == 0, result.output
    assert "created admin ops@example.com" in result.output
    response = client.post("/sign-in", data={"email": "ops@example.com", "password": PASSWORD,
                                              "csrf_token": csrf_token(client)})
    assert response.status_code == 302


def test_users_create_names_the_field_it_refuses_and_writes_nothing(runner, sql):
    short = runner.invoke(args=["users", "create", "c@example.com", "--password", "short"])
    assert short.exit_code == 2 and "password: must have at least 12 characters" in short.output
    not_email = runner.invoke(args=["users", "create", "nobody", "--password", PASSWORD])
    assert not_email.exit_code == 2 and "email: 'nobody' is not an email address" in not_email.output
    assert sql("SELECT count(*) FROM jobsweb_users") == [(0,)]


def test_users_create_refuses_a_taken_email_and_a_bad_role(runner):
    runner.invoke(args=["users", "create", "a@example.com", "--password", PASSWORD])
    taken = runner.invoke(args=["users", "create", "A@example.com", "--password", PASSWORD])
    assert taken.exit_code == 2 and "already exists" in taken.output
    bad = runner.invoke(args=["users", "create", "b@example.com", "--role", "boss", "--password", PASSWORD])
    assert bad.exit_code == 2


def test_users_create_prompts_for_the_password(runner):
    result = runner.invoke(args=["users", "create", "p@example.com"], input=f"{PASSWORD}\n{PASSWORD}\n")
    assert result.exit_code == 0, result.output


def test_the_demo_admin_is_made_only_when_nobody_exists(app, sql):
    from jobsweb.web.accounts import ensure_demo_admin

    with committed(app):
        email, password = ensure_demo_admin()
        assert email == "admin@example.com" and len(password) >= 12
        assert ensure_demo_admin() is None
    assert sql("SELECT role FROM jobsweb_users") == [("admin",)]


@pytest.mark.parametrize("path", ["/", "/runs", "/workers", "/definitions"])
def test_a_viewer_can_read_every_page(sign_in, path):
    client = sign_in("viewer")
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["Vary"] == "Cookie, HX-Request" or "HX-Request" in response.headers["Vary"]


def test_a_viewer_cannot_enqueue(sign_in):
    client = sign_in("viewer")
    assert client.get("/enqueue").status_code == 403
    assert client.post("/enqueue", data={"csrf_token": csrf_token(client, "/")}).status_code == 403


@pytest.mark.parametrize("identity, why", [
    ("a" * 255 + "@example.com", "of 267 characters (at most 254)"),
    ("x" * 100_000, "of 100000 characters (at most 254)"),
    ("ann@example.com\r\nadmin@example.com signed in", "with a control character"),
    ("ann@example.com\x1b[2K", "with a control character"),
    ("ann\u202emoc.elpmaxe@", "with a control character"),
])
def test_an_identity_from_authorize_too_long_or_with_control_characters_is_refused_and_never_audited(
        database_url_for_tests, sql, caplog, identity, why):
    from flask import Flask

    from jobsweb import JobsWeb

    sql("TRUNCATE jobsweb_audit_log")
    answer = ["b" * 240 + "@example.com"]  # 252 characters: within the limit
    # A logger name of its own: "host" made here would exist when a later test's logging
    # config (alembic's, disable_existing_loggers) turns off every logger made before it.
    host = Flask("identity_host")
    host.config.update(SQLALCHEMY_DATABASE_URI=database_url_for_tests, SECRET_KEY="host-secret-0123456789abcdef-0123456789")
    JobsWeb(host, url_prefix="/admin/jobs", authorize=lambda: (answer[0], "admin"))
    client = host.test_client()
    token = csrf_token(client, "/admin/jobs/queues")
    assert client.post("/admin/jobs/queues/pause", data={"csrf_token": token, "queue": "mail"}).status_code == 302
    assert sql("SELECT user_email, action FROM jobsweb_audit_log") == [(answer[0], "pause")]

    answer[0] = identity
    caplog.clear()
    page = client.get("/admin/jobs/queues")
    assert page.status_code == 403 and identity not in page.get_data(as_text=True)
    refused = client.post("/admin/jobs/queues/resume", data={"csrf_token": token, "queue": "mail"})
    assert refused.status_code == 403
    lines = [r.getMessage() for r in caplog.records if "authorize()" in r.getMessage()]
    assert len(lines) == 2 and all(f"authorize() returned an identity {why} (" in line and "\n" not in line
                                   and len(line) < 200 for line in lines)
    assert sql("SELECT user_email, action FROM jobsweb_audit_log") == [("b" * 240 + "@example.com", "pause")]
