"""jobsweb inside a team's own Flask app (examples/host_app.py): the host's models, users, sign-in,
routes and migrations stay its own; the admin screen lives under /admin/jobs."""

import importlib
import os
import re
import shlex
import subprocess
import sys
from urllib.parse import quote

import psycopg
import pytest
from flask import Flask, abort
from sqlalchemy.engine import make_url

import jobsweb
from jobsweb import JobsWeb
from jobsweb.core import schema
from jobsweb.core.database import libpq_url
from tests.conftest import ROOT

# 32+ characters: out of TESTING (its flask commands, its worker), init_app refuses a shorter key.
HOST_SECRET = "host-secret-0123456789abcdef-0123456789"
HOST_SETTINGS = {"SECRET_KEY": HOST_SECRET, "TESTING": True}
PASSWORD = "host password"
# The host's engine on either driver: postgresql:// picks psycopg2, as in most Flask apps.
DRIVERS = {"psycopg2": "postgresql+psycopg2", "psycopg": "postgresql+psycopg"}


@pytest.fixture(params=sorted(DRIVERS))
def host(request, scratch_database, registry_snapshot):
    """(the example module, its app, its database URL): host tables made, jobsweb's migrated,
    the host's engine on psycopg2 or on psycopg 3.

    The module is loaded afresh, and the job types it registers are forgotten afterwards, so
    the standalone tests never see them."""
    module = importlib.reload(importlib.import_module("examples.host_app"))
    url = make_url(scratch_database("jobsweb_host", revision=None)).set(drivername=DRIVERS[request.param])
    url = url.render_as_string(hide_password=False)
    app = module.create_app({"SQLALCHEMY_DATABASE_URI": url, **HOST_SETTINGS})
    runner = app.test_cli_runner()
    assert runner.invoke(args=["init-db"]).exit_code == 0
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        # The host's own Alembic history, which jobsweb's migrations must leave alone.
        conn.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('host_0042')")
        conn.execute("INSERT INTO customers (email, invoices_sent) VALUES ('ann@example.com', 0)")
    for email, role in (("vera@example.com", "viewer"), ("otto@example.com", "operator")):
        env = {"ACCOUNT_EMAIL": email, "ACCOUNT_ROLE": role, "ACCOUNT_PASSWORD": PASSWORD}
        assert runner.invoke(args=["add-account"], env=env).exit_code == 0
    result = runner.invoke(args=["jobs", "migrate"])
    assert result.exit_code == 0, result.output
    [head], every = schema.revisions()
    # It says what it did: every migration applied to a new database; nothing the second time.
    assert result.output == f"jobsweb's schema: applied {len(every)} migrations, 0001_foundation to {head}: it is up to date\n"
    assert runner.invoke(args=["jobs", "migrate"]).output == f"jobsweb's schema is up to date ({head})\n"
    return module, app, url


def query(url, statement, params=None):
    with psycopg.connect(libpq_url(url)) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def sign_in_form(client, path="/login"):
    """The host's sign-in page's CSRF token."""
    html = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', html).group(1)


def signed_in(app, email, next_path=None):
    client = app.test_client()
    path = "/login" if next_path is None else f"/login?next={quote(next_path, safe='')}"
    response = client.post(path, data={"email": email, "password": PASSWORD, "csrf_token": sign_in_form(client)})
    assert response.status_code == 302
    return client


def csrf(client, path):
    html = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)


def test_flask_jobs_migrate_leaves_the_hosts_tables_and_alembic_history_alone(host):
    _, _, url = host
    assert query(url, "SELECT version_num FROM alembic_version") == [("host_0042",)]
    # jobsweb's own version table holds jobsweb's head, whatever migration that is now.
    [head] = schema.revisions()[0]
    assert query(url, "SELECT version_num FROM jobsweb_alembic_version") == [(head,)]
    assert query(url, "SELECT email, role FROM users ORDER BY id") == [
        ("vera@example.com", "viewer"), ("otto@example.com", "operator")]
    ours = {name for (name,) in query(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    ours -= {"alembic_version", "users", "customers"}
    assert ours and all(name.startswith(("job_", "jobsweb_")) for name in ours), ours


def test_the_hosts_autogenerate_after_flask_jobs_migrate_finds_no_change(host, tmp_path):
    _, app, url = host
    query(url, "DELETE FROM alembic_version")  # a fresh history for the host (no host_0042 file here)
    runner = app.test_cli_runner()
    directory = str(tmp_path / "host_migrations")
    assert runner.invoke(args=["db", "init", "-d", directory]).exit_code == 0
    result = runner.invoke(args=["db", "migrate", "-d", directory, "-m", "host change"])
    assert result.exit_code == 0, result.output
    # Flask-Migrate writes no file for an empty migration; without the exclusion it wrote one
    # with 16 drop_table (every job_* and jobsweb_* table) and 32 drop_index.
    written = [path.read_text() for path in (tmp_path / "host_migrations" / "versions").glob("*.py")]
    assert written == []
    ours = {name for (name,) in query(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert ours - {"alembic_version", "users", "customers"} == schema.tables()
    # The same rule for a host on plain Alembic: include_name=jobsweb.alembic_include_name.
    assert [jobsweb.alembic_include_name(name, "table", {}) for name in ("users", "job_runs", "job_postings")] == [
        True, False, True]


def test_a_handler_runs_in_the_hosts_context_in_a_separate_worker_process(host):
    module, app, url = host
    # The host's JSON API has no CSRF token: jobsweb's checks do not reach it.
    response = app.test_client().post("/api/customers/1/invoice")
    assert response.status_code == 202
    run_id = response.get_json()["run_id"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSWEB_")}
    env.update(DATABASE_URL=url, SECRET_KEY=HOST_SECRET)
    # No JOBSWEB_HANDLERS: the host's module registers send_invoice when the app is imported.
    worker = subprocess.run([sys.executable, "-m", "flask", "--app", "examples.host_app", "run-jobs"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    assert query(url, "SELECT status, result FROM job_runs WHERE id = %s", [run_id]) == [
        ("succeeded", {"sent_to": "ann@example.com"})]
    assert query(url, "SELECT invoices_sent, last_note FROM customers") == [(1, "Thank you for your business")]


def test_nobody_signed_in_to_the_host_is_sent_to_the_hosts_sign_in(host):
    _, app, _ = host
    client = app.test_client()
    response = client.get("/admin/jobs/runs")
    assert response.status_code == 302
    assert response.headers["Location"] == "/login?next=%2Fadmin%2Fjobs%2Fruns"
    assert client.get("/admin/jobs/runs", headers={"HX-Request": "true"}).status_code == 401
    # jobsweb's own sign-in page does not exist when the host signs people in.
    assert client.get("/admin/jobs/sign-in").status_code == 404
    assert client.get("/admin/jobs/healthz").get_json() == {"status": "ok"}


def test_the_admin_screen_works_under_the_prefix_with_the_hosts_roles(host):
    module, app, url = host
    with app.app_context():
        run_id = module.enqueue("jobsweb.fail", {"permanent": True})
    query(url, "UPDATE job_runs SET status = 'dead' WHERE id = %s", [run_id])

    viewer = signed_in(app, "vera@example.com")
    page = viewer.get("/admin/jobs/runs").get_data(as_text=True)
    assert f'href="/admin/jobs/runs/{run_id}"' in page
    assert 'href="/admin/jobs/static/app.css' in page and 'src="/admin/jobs/vendor/htmx/htmx.min.js' in page
    assert "vera@example.com" in page and "Sign out" not in page  # the host signs people out
    assert viewer.get("/admin/jobs/static/app.css").status_code == 200
    assert viewer.get("/admin/jobs/vendor/htmx/htmx.min.js").status_code == 200
    token = csrf(viewer, f"/admin/jobs/runs/{run_id}")
    assert viewer.post(f"/admin/jobs/runs/{run_id}/retry", data={"csrf_token": token}).status_code == 403

    operator = signed_in(app, "otto@example.com")
    assert operator.post(f"/admin/jobs/runs/{run_id}/retry").status_code == 400  # no CSRF token
    token = csrf(operator, f"/admin/jobs/runs/{run_id}")
    response = operator.post(f"/admin/jobs/runs/{run_id}/retry", data={"csrf_token": token})
    assert response.status_code == 302 and response.headers["Location"] == f"/admin/jobs/runs/{run_id}"
    assert query(url, "SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("queued",)]
    assert query(url, "SELECT user_id, user_email, action FROM jobsweb_audit_log") == [
        (None, "otto@example.com", "retry")]


# Every page of the admin screen under the host's prefix ({run}, {definition}: ids).
PAGES = ["/", "/runs", "/runs/{run}", "/definitions", "/definitions/new", "/definitions/{definition}",
         "/definitions/{definition}/edit", "/enqueue", "/workers", "/queues", "/incidents", "/audit", "/healthz"]


def test_the_hints_to_start_a_worker_name_the_host_app_and_the_one_they_give_runs_its_jobs(host):
    """Not `flask --app wsgi`, the standalone app's module, which a host app does not have."""
    _, app, url = host
    client = signed_in(app, "vera@example.com")
    [dashboard] = re.findall(r"Start one with <code>([^<]*)</code>", client.get("/admin/jobs/").get_data(as_text=True))
    assert dashboard == "flask --app examples.host_app run-jobs --forever"
    [workers] = re.findall(r"Run <code>([^<]*)</code> from cron", client.get("/admin/jobs/workers").get_data(as_text=True))
    assert workers == "flask --app examples.host_app run-jobs"
    run_id = app.test_client().post("/api/customers/1/invoice").get_json()["run_id"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSWEB_")}
    env.update(DATABASE_URL=url, SECRET_KEY=HOST_SECRET)
    done = subprocess.run([sys.executable, "-m", *shlex.split(workers)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert query(url, "SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("succeeded",)]


def test_every_admin_page_is_served_under_the_prefix_to_a_host_admin(host):
    module, app, url = host
    env = {"ACCOUNT_EMAIL": "ada@example.com", "ACCOUNT_ROLE": "admin", "ACCOUNT_PASSWORD": PASSWORD}
    assert app.test_cli_runner().invoke(args=["add-account"], env=env).exit_code == 0
    with app.app_context():
        run_id = module.enqueue("send_invoice", {"customer_id": 1})
    [(definition_id,)] = query(url, "INSERT INTO job_definitions (name, job_type, schedule) "
                                    "VALUES ('nightly', 'send_invoice', '0 3 * * *') RETURNING id")
    admin = signed_in(app, "ada@example.com")
    for page in PAGES:
        path = "/admin/jobs" + page.format(run=run_id, definition=definition_id)
        response = admin.get(path)
        assert response.status_code == 200, (path, response.get_data(as_text=True)[:2000])


def test_the_hosts_routes_and_404_page_stay_the_hosts(host):
    _, app, _ = host
    client = signed_in(app, "otto@example.com")
    assert client.get("/nowhere").get_data(as_text=True) == "The host's own 404 page"
    assert client.get("/admin/jobs/nowhere").get_data(as_text=True) == "The host's own 404 page"
    # A page of jobsweb's that finds nothing answers with jobsweb's page, inside its layout.
    missing = client.get("/admin/jobs/runs/999999")
    assert missing.status_code == 404 and "There is no run 999999." in missing.get_data(as_text=True)
    assert client.get("/").status_code == 200


def test_in_chromium_the_admin_under_the_prefix_signs_in_through_the_host_and_acts_by_its_roles(
        host, browser, serve):
    from playwright.sync_api import expect

    module, app, url = host
    [(run_id,)] = query(url, "INSERT INTO job_runs (job_type, status, attempts, last_error, error_type) "
                             "VALUES ('send_invoice', 'dead', 3, 'SMTP refused', 'RuntimeError') RETURNING id")
    base = serve(app)

    def sign_in_as(email):
        context = browser.new_context(base_url=base)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto("/admin/jobs/runs")
        expect(page).to_have_url(re.compile(r"/login\?next="))  # the host's own sign-in page
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{base}/admin/jobs/runs")
        page.wait_for_load_state()  # htmx set up: a chip clicked before it would filter nothing
        return context, page

    context, page = sign_in_as("otto@example.com")
    page.get_by_text("dead", exact=True).click()  # a status chip: htmx swaps the table under the prefix
    expect(page).to_have_url(re.compile(r"/admin/jobs/runs\?.*status=dead"))
    page.locator(f'#runs-table a[href="/admin/jobs/runs/{run_id}"]').click()
    expect(page.locator(".error-card")).to_contain_text("SMTP refused")
    page.get_by_role("button", name="Retry now").click()
    expect(page.get_by_text("is queued again")).to_be_visible()
    expect(page.locator(".audit")).to_contain_text("otto@example.com")
    context.close()

    context, page = sign_in_as("vera@example.com")
    page.goto(f"/admin/jobs/runs/{run_id}")
    expect(page.get_by_role("heading", name=re.compile(f"Run #{run_id}"))).to_be_visible()
    expect(page.get_by_role("button", name="Retry now")).to_have_count(0)
    context.close()


def flask_command(*args, database_url, python=sys.executable):
    """`flask --app examples.host_app ARGS` as its own process, DATABASE_URL as given."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSWEB_")}
    env.update(DATABASE_URL=database_url, SECRET_KEY=HOST_SECRET)
    return subprocess.run([python, "-m", "flask", "--app", "examples.host_app", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_on_sqlite_the_hosts_commands_and_pages_work_and_jobswebs_say_it_needs_postgresql(tmp_path,
                                                                                           registry_snapshot):
    sqlite = f"sqlite:///{tmp_path / 'host.db'}"
    assert flask_command("init-db", database_url=sqlite).returncode == 0
    routes = flask_command("routes", database_url=sqlite)
    assert routes.returncode == 0 and "/admin/jobs" in routes.stdout, routes.stderr
    for command in (["jobs", "migrate"], ["run-jobs"]):
        refused = flask_command(*command, database_url=sqlite)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            f"Error: jobsweb needs PostgreSQL, but SQLALCHEMY_DATABASE_URI (or DATABASE_URL) is '{sqlite}': "
            "set it to postgresql://user:password@host:5432/dbname")
    module = importlib.reload(importlib.import_module("examples.host_app"))
    app = module.create_app({"SQLALCHEMY_DATABASE_URI": sqlite, **HOST_SETTINGS})
    client = app.test_client()
    assert client.get("/").status_code == 200
    page = client.get("/admin/jobs/runs")
    assert page.status_code == 500 and "jobsweb needs PostgreSQL" in page.get_data(as_text=True)


@pytest.mark.parametrize("answer, status", [
    (None, 302), (False, 302), ("", 302), ((), 302),  # falsy: nobody signed in, to the host's sign-in
    (("ann@example.com", None), 403),  # signed in, not allowed
    (("ann@example.com",), 403), ({"identity": "ann"}, 403), (("ann@example.com", "ADMIN"), 403),
    ((None, "admin"), 403), (("", "operator"), 403), ((" ", "operator"), 403), ((True, "admin"), 403),
    ("ann@example.com", 403),
])
def test_each_answer_of_authorize_is_sign_in_a_403_or_a_viewer_never_a_500(database_url_for_tests, answer, status,
                                                                            caplog):
    host = Flask("host")
    host.config.update(SQLALCHEMY_DATABASE_URI=database_url_for_tests, SECRET_KEY=HOST_SECRET,
                       JOBSWEB_LOGIN_URL="/login")
    JobsWeb(host, url_prefix="/admin/jobs", authorize=lambda: answer)
    client = host.test_client()
    response = client.get("/admin/jobs/runs")
    assert response.status_code == status
    if status == 403:
        page = response.get_data(as_text=True)
        # No way further in from the 403 page: no dashboard link, no navigation.
        assert "/admin/jobs/runs" not in page and 'href="/admin/jobs/"' not in page
        assert client.get("/admin/jobs/static/app.css").status_code == 200
        refused_as_malformed = answer != ("ann@example.com", None)
        assert ("authorize() returned" in caplog.text) == refused_as_malformed


def test_a_host_viewer_is_refused_by_authorize_aborting_with_403(database_url_for_tests):
    host = Flask("host")
    host.config.update(SQLALCHEMY_DATABASE_URI=database_url_for_tests, SECRET_KEY=HOST_SECRET)

    def authorize():
        abort(403)

    JobsWeb(host, url_prefix="/admin/jobs", authorize=authorize)
    response = host.test_client().get("/admin/jobs/")
    assert response.status_code == 403 and "dashboard" not in response.get_data(as_text=True).lower()


def test_with_authorize_there_is_no_user_management(host):
    _, app, _ = host
    env = {"ACCOUNT_EMAIL": "ada@example.com", "ACCOUNT_ROLE": "admin", "ACCOUNT_PASSWORD": PASSWORD}
    assert app.test_cli_runner().invoke(args=["add-account"], env=env).exit_code == 0
    admin = signed_in(app, "ada@example.com")
    assert admin.get("/admin/jobs/users").status_code == 404
    page = admin.get("/admin/jobs/").get_data(as_text=True)
    assert 'href="/admin/jobs/audit"' in page and 'href="/admin/jobs/users"' not in page


# The host's own test suites (examples/test_host_on_*.py) run as their docstrings say, from the
# repository's top level: tests/docs/test_examples.py.


def test_the_hosts_sign_in_needs_its_csrf_token_and_goes_back_only_to_its_own_pages(host):
    _, app, _ = host
    client = app.test_client()
    refused = client.post("/login", data={"email": "otto@example.com", "password": PASSWORD})
    assert refused.status_code == 400 and client.get("/admin/jobs/runs").status_code == 302
    for target, landing in (("/admin/jobs/runs?status=dead", "/admin/jobs/runs?status=dead"),
                            ("https://evil.example/", "/"), ("//evil.example/x", "/"), ("/\\evil.example", "/"),
                            ("javascript:alert(1)", "/"), ("", "/")):
        client = app.test_client()
        response = client.post(f"/login?next={quote(target, safe='')}", data={
            "email": "otto@example.com", "password": PASSWORD, "csrf_token": sign_in_form(client)})
        assert (response.status_code, response.headers["Location"]) == (302, landing), target


def test_a_host_account_without_a_role_gets_a_403_without_links(host):
    _, app, _ = host
    env = {"ACCOUNT_EMAIL": "nell@example.com", "ACCOUNT_ROLE": "", "ACCOUNT_PASSWORD": PASSWORD}
    assert app.test_cli_runner().invoke(args=["add-account"], env=env).exit_code == 0
    response = signed_in(app, "nell@example.com").get("/admin/jobs/runs")
    page = response.get_data(as_text=True)
    assert response.status_code == 403 and "You are signed in as nell@example.com" in page
    assert "/admin/jobs/runs" not in page and "dashboard" not in page.lower()
