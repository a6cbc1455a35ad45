"""The /audit page: every audit entry, newest first, filtered, keyset-paged, for admins only."""

import re

import pytest


def entry_ids(html):
    return [int(n) for n in re.findall(r'<tr data-entry="(\d+)"', html)]


def add_entries(sql, rows):
    sql("INSERT INTO jobsweb_audit_log (user_email, action, target_type, target_id, detail) "
        "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::jsonb[])",
        [list(column) for column in zip(*rows)])


@pytest.fixture
def admin(sign_in, sql):
    """A signed-in admin, and an empty log: the sign-in's own entry would shift every id below."""
    client = sign_in("admin")
    sql("TRUNCATE jobsweb_audit_log RESTART IDENTITY")
    return client


def test_admins_see_every_entry_newest_first_with_links_to_what_was_acted_on(admin, sql):
    client = admin
    add_entries(sql, [("ann@example.com", "retry", "run", 8, '{"previous_status": "dead"}'),
                      ("bob@example.com", "pause", "definition", 3, "{}"),
                      ("ann@example.com", "bulk_cancel", "runs", None,
                       '{"scope": "matching", "filter": {"job_type": "jobsweb.sleep"}, "changed": 4}')])
    html = client.get("/audit").get_data(as_text=True)
    assert entry_ids(html) == [3, 2, 1]
    assert 'href="/runs/8">run #8</a>' in html and 'href="/definitions/3">definition #3</a>' in html
    assert 'href="/runs?job_type=jobsweb.sleep">runs</a>' in html and "changed: 4" in html
    assert 'href="/audit" aria-current="page">Audit</a>' in html


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_may_open_the_audit_page_or_see_it_in_the_nav(sign_in, role):
    client = sign_in(role)
    assert client.get("/audit").status_code == 403
    assert 'href="/audit"' not in client.get("/").get_data(as_text=True)


def test_it_filters_by_user_action_and_object(admin, sql):
    client = admin
    add_entries(sql, [("ann@example.com", "retry", "run", 8, "{}"), ("bob@example.com", "retry", "run", 9, "{}"),
                      ("ann@example.com", "pause", "definition", 8, "{}"), ("ann@example.com", "retry", "run", 9, "{}")])

    def ids(**query):
        return entry_ids(client.get("/audit", query_string=query).get_data(as_text=True))

    assert ids(user="ann@example.com") == [4, 3, 1]
    assert ids(action="retry") == [4, 2, 1]
    assert ids(object="run") == [4, 2, 1]
    assert ids(object="run", object_id=9) == [4, 2]
    assert ids(user="ann@example.com", action="retry", object="run", object_id=9) == [4]
    assert ids(user="nobody@example.com") == []
    html = client.get("/audit").get_data(as_text=True)
    actions = html.split('name="action"')[1].split("</select>")[0]
    assert '<option value="pause"' in actions and '<option value="retry"' in actions
    htmx = client.get("/audit?action=pause", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert htmx.lstrip().startswith('<section id="audit-table"') and entry_ids(htmx) == [3]


def test_keyset_pages_cover_every_entry_once(admin, sql):
    client = admin
    sql("INSERT INTO jobsweb_audit_log (user_email, action, target_type) "
        "SELECT 'ann@example.com', 'retry', 'run' FROM generate_series(1, 120)")
    seen, url = [], "/audit?action=retry"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += entry_ids(html)
        older = re.search(r'href="([^"]+)" rel="next"', html)
        url = older.group(1).replace("&amp;", "&") if older else None
    assert seen == list(range(120, 0, -1))


@pytest.mark.parametrize("query, words", [("object_id=abc", "object_id"), ("before=-1", "before"),
                                          ("user=" + "x" * 255, "longer than")])
def test_bad_audit_filters_are_a_400_with_a_message(sign_in, query, words):
    client = sign_in("admin")
    response = client.get(f"/audit?{query}")
    assert response.status_code == 400 and words in response.get_data(as_text=True)


def test_an_edit_entry_lists_the_changed_fields_with_secrets_masked(admin, sql):
    from tests.conftest import csrf_token

    form = {"name": "nightly", "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC",
            "payload": '{"batch": 5, "api_token": "old-secret"}', "overlap": "skip", "misfire": "latest",
            "grace_seconds": "300", "alert_webhook_url": "https://hooks.example.com/services/T0/OLDSECRET",
            "csrf_token": csrf_token(admin, "/")}
    assert admin.post("/definitions/new", data=form).status_code == 302
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    edited = {**form, "payload": '{"batch": 6, "api_token": "new-secret"}', "grace_seconds": "600",
              "alert_webhook_url": "https://evil.example.net/collect/NEWSECRET"}
    assert admin.post(f"/definitions/{definition_id}/edit", data=edited).status_code == 302
    [(detail,)] = sql("SELECT detail FROM jobsweb_audit_log WHERE action = 'edit'")
    assert detail == {"name": "nightly", "changes": {
        "payload": [{"batch": 5, "api_token": "••••••"}, {"batch": 6, "api_token": "••••••"}],
        "grace_seconds": [300, 600],
        "alert_webhook_url": ["https://hooks.example.com/…", "https://evil.example.net/…"]}}
    html = admin.get("/audit").get_data(as_text=True)
    assert "changed" in html and "alert webhook url (https://hooks.example.com/… → https://evil.example.net/…)" in html
    assert "old-secret" not in html and "new-secret" not in html and "OLDSECRET" not in html


def test_cli_changes_to_users_definitions_and_queues_are_audited_by_the_os_user(app, runner, sql):
    import getpass

    password = "a long unusual passphrase"
    commands = [
        ["users", "create", "ann@example.com", "--role", "operator", "--password", password],
        ["users", "deactivate", "ann@example.com"],
        ["users", "reactivate", "ann@example.com"],
        ["users", "reset-password", "ann@example.com", "--password", "another long passphrase"],
        ["users", "unlock", "ann@example.com"],
        ["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@daily", "--payload", '{"token": "t1"}'],
        ["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@hourly", "--payload", '{"token": "t2"}'],
        ["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@hourly", "--payload", '{"token": "t2"}'],
        ["jobs", "pause", "nightly"],
        ["jobs", "resume", "nightly"],
        ["jobs", "run-now", "nightly"],
        ["jobs", "queue", "mail", "--limit", "3", "--rate", "5/1"],
        ["jobs", "pause-type", "jobsweb.noop"],
        ["jobs", "resume-type", "jobsweb.noop"],
    ]
    for args in commands:
        result = runner.invoke(args=args)
        assert result.exit_code == 0, (args, result.output)
    entries = sql("SELECT user_email, action, detail FROM jobsweb_audit_log ORDER BY id")
    assert {who for who, _, _ in entries} == {f"cli:{getpass.getuser()}"}
    assert [action for _, action, _ in entries] == [
        "create_user", "deactivate_user", "reactivate_user", "reset_password", "unlock",
        "create", "edit", "pause", "resume", "run_now", "set_queue", "pause_type", "resume_type"]
    edit = entries[6][2]
    assert edit["changes"] == {"schedule": ["@daily", "@hourly"], "payload": [{"token": "••••••"}, {"token": "••••••"}]}
    assert entries[10][2] == {"queue": "mail", "limit": 3, "rate": "5/1"}
