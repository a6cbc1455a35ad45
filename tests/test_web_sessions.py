"""Issue 16, accounts: rotated sessions that sign-out, a password reset and deactivation end
everywhere, an idle timeout, and passwords that are not common (sign-in limits:
test_web_throttle.py)."""

import time

import pytest

from jobsweb.core.passwords import check_password
from jobsweb.core.errors import InvalidInput
from jobsweb.web.access import SEEN_KEY
from tests.conftest import PASSWORD, csrf_token


def sign_in_as(client, email, password=PASSWORD, next_path=""):
    return client.post("/sign-in" + next_path, data={"email": email, "password": password,
                                                     "csrf_token": csrf_token(client)})


def session_cookie(client):
    return client.get_cookie("session").value


def with_cookie(app, value):
    other = app.test_client()
    other.set_cookie("session", value)
    return other


def test_signing_in_gives_a_new_csrf_token(client, make_user):
    email = make_user("viewer")
    before = csrf_token(client)
    assert sign_in_as(client, email).status_code == 302
    assert csrf_token(client, "/") != before


def test_a_copied_cookie_is_no_good_after_sign_out(app, client, make_user):
    email = make_user("viewer")
    sign_in_as(client, email)
    copy = session_cookie(client)
    assert with_cookie(app, copy).get("/runs").status_code == 200
    client.post("/sign-out", data={"csrf_token": csrf_token(client, "/")})
    assert with_cookie(app, copy).get("/runs").status_code == 302


def test_signing_out_ends_the_users_other_sessions_too(app, make_user):
    email = make_user("viewer")
    laptop, phone = app.test_client(), app.test_client()
    sign_in_as(laptop, email)
    sign_in_as(phone, email)
    laptop.post("/sign-out", data={"csrf_token": csrf_token(laptop, "/")})
    assert phone.get("/runs").status_code == 302


def test_deactivating_a_user_from_the_cli_ends_their_sessions_and_sign_in(app, client, runner, make_user):
    email = make_user("operator")
    sign_in_as(client, email)
    result = runner.invoke(args=["users", "deactivate", email])
    assert result.exit_code == 0, result.output
    assert client.get("/runs").status_code == 302
    assert sign_in_as(client, email).status_code == 401
    assert runner.invoke(args=["users", "reactivate", email]).exit_code == 0
    assert sign_in_as(client, email).status_code == 302


def test_resetting_a_password_from_the_cli_ends_sessions_and_checks_the_new_one(app, client, runner, make_user):
    email = make_user("operator")
    sign_in_as(client, email)
    weak = runner.invoke(args=["users", "reset-password", email, "--password", "password1234"])
    assert weak.exit_code == 2 and "password: is one of the most common passwords" in weak.output
    assert client.get("/runs").status_code == 200
    result = runner.invoke(args=["users", "reset-password", email, "--password", "a brand new passphrase"])
    assert result.exit_code == 0, result.output
    assert client.get("/runs").status_code == 302
    assert sign_in_as(client, email, "a brand new passphrase").status_code == 302


def test_the_cli_names_an_unknown_email_and_a_control_character(runner):
    unknown = runner.invoke(args=["users", "deactivate", "nobody@example.com"])
    assert unknown.exit_code == 2 and "email: no user has the email" in unknown.output
    nul = runner.invoke(args=["users", "create", "a\x01@example.com", "--password", PASSWORD])
    assert nul.exit_code == 2 and "email: must not contain the control character" in nul.output
    key = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", "--idempotency-key", "k\r\nx"])
    assert key.exit_code == 2 and "idempotency_key: must not contain" in key.output


def test_admins_deactivate_reactivate_and_reset_passwords_on_the_users_page(app, sign_in, make_user, sql):
    admin = sign_in("admin")
    email = make_user("viewer")
    user_id = sql("SELECT id FROM jobsweb_users WHERE email = %s", [email])[0][0]
    other = app.test_client()
    sign_in_as(other, email)
    token = csrf_token(admin, "/")
    assert admin.post(f"/users/{user_id}/deactivate", data={"csrf_token": token}).status_code == 302
    assert other.get("/runs").status_code == 302
    assert "deactivated" in admin.get("/users").get_data(as_text=True)
    assert admin.post(f"/users/{user_id}/reactivate", data={"csrf_token": token}).status_code == 302
    short = admin.post(f"/users/{user_id}/password", data={"password": "short", "csrf_token": token})
    assert short.status_code == 400 and "at least 12 characters" in short.get_data(as_text=True)
    assert admin.post(f"/users/{user_id}/password", data={"password": "another fine passphrase",
                                                          "csrf_token": token}).status_code == 302
    assert sign_in_as(other, email, "another fine passphrase").status_code == 302
    me = sql("SELECT id FROM jobsweb_users WHERE role = 'admin'")[0][0]
    assert admin.post(f"/users/{me}/deactivate", data={"csrf_token": token}).status_code == 400
    actions = [a for (a,) in sql("SELECT action FROM jobsweb_audit_log WHERE action <> 'sign_in' ORDER BY id")]
    assert actions == ["deactivate_user", "reactivate_user", "reset_password"]


def test_a_session_idle_past_the_timeout_ends(app, client, make_user):
    email = make_user("viewer")
    sign_in_as(client, email)
    with client.session_transaction() as session:
        session[SEEN_KEY] = int(time.time()) - app.config["JOBSWEB_SESSION_IDLE_SECONDS"] - 1
    assert client.get("/runs").status_code == 302


def test_a_session_in_use_stays(app, client, make_user):
    email = make_user("viewer")
    sign_in_as(client, email)
    with client.session_transaction() as session:
        session[SEEN_KEY] = int(time.time()) - app.config["JOBSWEB_SESSION_IDLE_SECONDS"] + 120
    assert client.get("/runs").status_code == 200
    with client.session_transaction() as session:
        assert session[SEEN_KEY] >= int(time.time()) - 5  # the request moved the idle clock


@pytest.mark.parametrize("password", ["password", "12345678", "password1234", "P@ssw0rd2024!", "qwerty123456",
                                      "aaaaaaaaaaaa", "123456789012", "Summer2026!!", "short"])
def test_short_and_common_passwords_are_refused(password):
    with pytest.raises(InvalidInput) as refused:
        check_password(password)
    assert refused.value.field == "password"


def test_a_long_uncommon_password_is_accepted():
    assert check_password(PASSWORD) == PASSWORD


def test_the_users_form_refuses_a_common_password_in_place(sign_in, sql):
    client = sign_in("admin")
    response = client.post("/users", data={"email": "b@example.com", "role": "viewer", "password": "password1234",
                                           "csrf_token": csrf_token(client, "/")})
    assert response.status_code == 422 and "most common passwords" in response.get_data(as_text=True)
    assert sql("SELECT count(*) FROM jobsweb_users") == [(1,)]
