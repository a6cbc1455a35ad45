from tests.conftest import PASSWORD, csrf_token


def test_only_admins_see_the_users_page(sign_in):
    assert sign_in("operator").get("/users").status_code == 403


def test_an_admin_adds_a_user_who_can_then_sign_in(sign_in, app, sql):
    client = sign_in("admin")
    response = client.post("/users", data={"csrf_token": csrf_token(client, "/"), "email": "new@example.com",
                                           "role": "viewer", "password": PASSWORD})
    assert response.status_code == 302
    assert sql("SELECT email, role FROM jobsweb_users WHERE email = 'new@example.com'") == [("new@example.com", "viewer")]
    assert sql("SELECT action FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [("create_user",)]
    other = app.test_client()
    assert other.post("/sign-in", data={"email": "new@example.com", "password": PASSWORD,
                                        "csrf_token": csrf_token(other)}).status_code == 302


def test_adding_a_taken_email_shows_the_error_in_place(sign_in):
    client = sign_in("admin")
    response = client.post("/users", headers={"HX-Request": "true"}, data={
        "csrf_token": csrf_token(client, "/"), "email": "ADMIN@example.com", "role": "viewer", "password": PASSWORD})
    html = response.get_data(as_text=True)
    assert response.status_code == 422 and html.lstrip().startswith('<form id="user-form"')
    assert "already exists" in html


def test_an_admin_changes_a_role_but_not_their_own(sign_in, make_user, sql):
    client = sign_in("admin")
    make_user("viewer")
    [(viewer,)] = sql("SELECT id FROM jobsweb_users WHERE role = 'viewer'")
    [(admin,)] = sql("SELECT id FROM jobsweb_users WHERE role = 'admin'")
    token = csrf_token(client, "/")
    assert client.post(f"/users/{viewer}/role", data={"csrf_token": token, "role": "operator"}).status_code == 302
    assert client.post(f"/users/{admin}/role", data={"csrf_token": token, "role": "viewer"}).status_code == 400
    assert client.post(f"/users/{viewer}/role", data={"csrf_token": token, "role": "god"}).status_code == 400
    assert sql("SELECT role FROM jobsweb_users ORDER BY id") == [("admin",), ("operator",)]
