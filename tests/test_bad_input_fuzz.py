"""Every form field of the admin screen and every option and argument of jobsweb's commands,
given a NUL, 10,000 characters or bytes that are not UTF-8 (issue 53, item 4): a 4xx naming the
field, or a one-line usage error naming it; never a 500 or a traceback, and nothing written.

The forms are found as a browser finds them: every page of the admin screen, as an admin sees
it with one object of each kind, is read for its POST forms, and each form is sent back as the
page filled it with one field changed. A test then checks that every POST route was reached,
so a new form cannot be left out. The commands are found from the click groups themselves."""

import re
from html.parser import HTMLParser
from urllib.parse import urlencode

import click
import pytest

from tests.conftest import committed, define

NUL = "a\x00b"
LONG = "x" * 10_000
# Not UTF-8 (a Latin-1 é, a lone continuation byte): a form is sent as bytes, so these reach the
# server as they are; Python reads them as U+FFFD (a form) or as lone surrogates (argv).
NOT_UTF8 = b"caf\xe9 \x80"
BAD = {"nul": NUL, "long": LONG, "not_utf8": NOT_UTF8}

# Tables whose rows a refused request must leave as they were.
WATCHED = ("job_runs", "job_definitions", "job_workers", "job_queues", "job_paused_types", "jobsweb_users",
           "jobsweb_audit_log", "job_batches", "jobsweb_alert_incidents", "job_attempts")


class Forms(HTMLParser):
    """The POST forms of a page: [(action, {name: value as the page filled it})]."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.forms, self.form, self.select, self.textarea = [], None, None, None
        self.formactions = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and (a.get("method", "get").lower() == "post" or "hx-post" in a):
            self.form = (a.get("action") or a.get("hx-post"), {})
            self.forms.append(self.form)
        elif self.form is None:
            return
        elif tag == "input" and a.get("name") and a.get("type") not in ("submit", "button"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                self.form[1].setdefault(a["name"], None)  # a field all the same, sent unticked
            else:
                self.form[1][a["name"]] = a.get("value", "")
        elif tag == "button" and a.get("formaction"):
            # Another action for the same fields (its own name and value with them).
            self.formactions.append((a["formaction"], self.form[1], a.get("name"), a.get("value", "")))
        elif tag == "button" and a.get("name"):
            self.form[1].setdefault(a["name"], a.get("value", ""))
        elif tag == "select" and a.get("name"):
            self.select = a["name"]
            self.form[1].setdefault(a["name"], None)
        elif tag == "option" and self.select:
            if self.form[1][self.select] is None or "selected" in a:
                self.form[1][self.select] = a.get("value", "")
        elif tag == "textarea" and a.get("name"):
            self.textarea = a["name"]
            self.form[1][a["name"]] = ""

    def handle_data(self, data):
        if self.textarea:
            self.form[1][self.textarea] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self.form = None
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            if self.textarea and self.form[1][self.textarea].startswith("\n"):
                self.form[1][self.textarea] = self.form[1][self.textarea][1:]
            self.textarea = None


def forms_of(html):
    parser = Forms()
    parser.feed(html)
    extra = [(action, {**fields, **({name: value} if name else {})})
             for action, fields, name, value in parser.formactions]
    return [(action, dict(fields)) for action, fields in parser.forms] + extra


@pytest.fixture
def seeded(app, sql, sign_in, make_user):
    """An admin's client on a screen with one object of each kind (and each one's other state:
    paused and not, active and not, failed and queued), and the pages showing their forms."""
    from jobsweb import batch, enqueue

    client = sign_in("admin")
    other, gone = make_user("viewer", "other@example.com"), make_user("viewer", "gone@example.com")
    definition = define(app, "nightly", payload={"a": 1})
    paused = define(app, "paused one")
    watched = define(app, "watched", job_type=None, external=True)
    sql("UPDATE job_definitions SET enabled = false WHERE id = %s", [paused])
    sql("UPDATE jobsweb_users SET active = false WHERE email = %s", [gone])
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('h:1:aa', 'h', 1)")
    sql("INSERT INTO job_workers (id, host, pid, quiet_at, quiet_by) VALUES ('h:2:bb', 'h', 2, now(), 'x@example.com')")
    if sql("SELECT 1 FROM information_schema.columns WHERE table_name = 'job_workers' AND column_name = 'concurrency'"):
        # A worker that wrote its concurrency (0034_worker_stop) reads a stop: the page offers Stop.
        sql("UPDATE job_workers SET concurrency = 4 WHERE id = 'h:1:aa'")
    sql("INSERT INTO job_queues (name, paused) VALUES ('mail', false), ('held', true)")
    sql("INSERT INTO job_paused_types (job_type) VALUES ('paused.type')")
    with committed(app):
        queued = enqueue("jobsweb.noop", {}, delay=3600)
        assert queued == 1  # FILLED fills in its reschedule form
        with batch(on_finish="jobsweb.noop") as made:
            made.enqueue("jobsweb.noop", {})
    [(dead,)] = sql("INSERT INTO job_runs (job_type, status, attempts, max_attempts, last_error, finished_at, "
                    "batch_id) VALUES ('jobsweb.noop', 'dead', 1, 1, 'boom', now(), %s) RETURNING id", [made.id])
    [(user,)] = sql("SELECT id FROM jobsweb_users WHERE email = %s", [other])
    pages = ["/", "/runs", "/runs?status=dead", f"/runs/{queued}", f"/runs/{dead}", f"/runs/{queued}/delete",
             "/definitions", f"/definitions/{definition}", f"/definitions/{paused}", f"/definitions/{watched}",
             "/definitions/new", f"/definitions/{definition}/edit", f"/definitions/{definition}/delete", "/enqueue",
             "/users", "/workers", "/queues", "/incidents", "/batches", f"/batches/{made.id}", "/job-metrics"]
    return client, pages, {"queued": queued, "dead": dead, "user": user}


def snapshot(sql):
    """Every watched table's rows, as one digest each."""
    return {table: sql(f"SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {table} t")[0][0]
            for table in WATCHED}


# What a person would type where a page leaves a required field empty, so that each form is
# valid but for the one field changed.
FILLED = {"/definitions/new": {"name": "fuzzed", "schedule": "@daily", "job_type": "jobsweb.noop"},
          "/runs/1/reschedule": {"run_at": "2030-01-01T00:00"},
          "/users": {"email": "new@example.com", "password": "a much longer password 42"},
          "/queues/job-types/pause": {"job_type": "jobsweb.noop"},
          "/queues/limits": {"queue": "mail", "limit": "2"},
          "/queues/pause": {"queue": "mail"},
          "/enqueue": {"job_type": "jobsweb.noop", "run_at": "2030-01-01T00:00", "tz": "UTC"}}
# Fields whose value a route does not read: the definition's name on its edit form (it is never
# renamed there) and its External box (a box sent at all is ticked, whatever its value).
IGNORED = {("edit", "name"), ("edit", "external"), ("new", "external")}


def all_forms(client, pages):
    """{action: {field: the value the page filled in (None: a box left unticked)}}."""
    found = {}
    for page in pages:
        answer = client.get(page)
        assert answer.status_code == 200, page
        for action, fields in forms_of(answer.get_data(as_text=True)):
            found.setdefault(action or page, fields)
    return found


def body(fields, name, value):
    """The urlencoded body of a form with `name` set to `value` (bytes go as they are)."""
    pairs = [(k, v) for k, v in fields.items() if v is not None and k != name] + [(name, value)]
    return urlencode(pairs).encode()


def error_of(html, name):
    """What the answer says is wrong with field `name`: its label's field errors, a `name: ...`
    line, or the page's error box or alert."""
    label = re.search(r'<label class="field[^"]*has-error[^"]*">(?:(?!</label>).)*?name="%s"(?:(?!</label>).)*</label>'
                      % re.escape(name), html, re.S)
    if label:
        return f"{name}: " + " ".join(re.findall(r'class="field-error">([^<]*)<', label.group(0)))
    boxes = re.findall(r'<p class="(?:field-error|alert)"[^>]*>([^<]*)<', html)
    boxes += re.findall(r'<div class="error-box" role="alert">\s*<h2>[^<]*</h2>\s*<p>(.*?)</p>', html, re.S)
    return " ".join(boxes)


def names(message, name):
    words = {name, name.replace("_", " "), f"Bad {name}"} | ({"CSRF"} if name == "csrf_token" else set())
    return any(word in message for word in words)


def test_every_form_field_refuses_a_nul_and_ten_thousand_characters_naming_the_field(seeded, sql):
    client, pages, _ = seeded
    found, failures, sent = all_forms(client, pages), [], 0
    for action, fields in sorted(found.items()):
        fields = {**fields, **FILLED.get(action, {})}
        for name in fields:
            for kind in ("nul", "long"):
                before = snapshot(sql)
                answer = client.post(action, data=body(fields, name, BAD[kind]),
                                     content_type="application/x-www-form-urlencoded")
                sent += 1
                html, changed = answer.get_data(as_text=True), snapshot(sql) != before
                if (action.rpartition("/")[2], name) in IGNORED:
                    if answer.status_code >= 500 or LONG in str(sql("SELECT * FROM job_definitions")):
                        failures.append(f"{action} {name} {kind}: {answer.status_code} or stored")
                elif answer.status_code not in (400, 404, 422) or changed or not names(error_of(html, name), name):
                    failures.append(f"{action} {name} {kind}: {answer.status_code}, changed {changed}, "
                                    f"said {error_of(html, name)[:120]!r}")
    print(f"{len(found)} forms, {sent} requests", *failures, sep="\n")
    assert failures == [] and sent > 200


def test_every_form_field_given_bytes_that_are_not_utf8_is_refused_naming_the_field(seeded, sql):
    """Werkzeug reads them as U+FFFD, so `caf%E9` and `caf%E8` were one idempotency key:
    guards.check_utf8 refuses them before the form is read."""
    client, pages, _ = seeded
    failures = []
    for action, fields in sorted(all_forms(client, pages).items()):
        fields = {**fields, **FILLED.get(action, {})}
        for name in fields:
            before = snapshot(sql)
            answer = client.post(action, data=body(fields, name, NOT_UTF8),
                                 content_type="application/x-www-form-urlencoded")
            html = answer.get_data(as_text=True)
            if answer.status_code != 400 or snapshot(sql) != before or not names(error_of(html, name), name):
                failures.append(f"{action} {name}: {answer.status_code}, said {error_of(html, name)[:120]!r}")
    assert failures == []


def test_a_query_string_with_bytes_that_are_not_utf8_is_refused_naming_the_parameter(seeded):
    client, _, _ = seeded
    answer = client.get("/runs?job_type=caf%E9")
    assert answer.status_code == 400 and "job_type: is not UTF-8 text" in answer.get_data(as_text=True)


def test_the_forms_found_reach_every_post_route_of_the_admin_screen(app, seeded):
    """A new form or route is fuzzed as soon as a page shows it; one no page shows fails here."""
    client, pages, _ = seeded
    urls = app.url_map.bind("localhost")
    reached = {urls.match(action.partition("?")[0], method="POST")[0] for action in all_forms(client, pages)}
    posts = {rule.endpoint for rule in app.url_map.iter_rules() if "POST" in rule.methods}
    # Not a form of a signed-in page: sign-in has its own test below, pings take a body, not a form.
    elsewhere = {"jobsweb.auth.sign_in", "jobsweb.pings.ping", "jobsweb.pings.ping_code",
                 "jobsweb.pings.ping_fail", "jobsweb.pings.ping_start"}
    assert posts - elsewhere - reached == set()


def test_the_sign_in_form_refuses_bad_input_naming_the_field(client, sql):
    fields = dict(forms_of(client.get("/sign-in").get_data(as_text=True))[0][1])
    for name in ("email", "password"):
        for kind, value in BAD.items():
            answer = client.post("/sign-in", data=body({**fields, "email": "a@example.com", "password": "x" * 12},
                                                       name, value),
                                 content_type="application/x-www-form-urlencoded")
            assert answer.status_code in (400, 401, 422), (name, kind, answer.status_code)
            assert sql("SELECT count(*) FROM jobsweb_users") == [(0,)]


def test_a_ping_body_with_a_nul_or_bytes_that_are_not_utf8_is_recorded_as_text(app, client, sql):
    watched = define(app, "watched", job_type=None, external=True)
    [(token,)] = sql("SELECT ping_token FROM job_definitions WHERE id = %s", [watched])
    for raw in (b"out\x00put", NOT_UTF8, LONG.encode()):
        assert client.post(f"/ping/{token}", data=raw).status_code == 200


# -- the command line ------------------------------------------------------------------------

# A valid invocation of each command (its required arguments and options), which each case
# changes in one parameter. What argv holds when the shell passes bytes that are not UTF-8:
# Python reads them as lone surrogates.
ARGV_NOT_UTF8 = NOT_UTF8.decode("utf-8", "surrogateescape")
VALID = {
    "jobs batch": {"batch_id": "1"},
    "jobs define": {"name": "from the shell", "job_type": "jobsweb.noop", "schedule": "@daily"},
    "jobs enqueue": {"job_type": "jobsweb.noop"},
    "jobs exec": {"name": "watched", "command": "true"},
    "jobs mark-deploy": {"label": "v1"},
    "jobs pause": {"name": "nightly"}, "jobs resume": {"name": "nightly"}, "jobs run-now": {"name": "nightly"},
    "jobs pause-type": {"job_type": "jobsweb.noop"}, "jobs resume-type": {"job_type": "jobsweb.noop"},
    "jobs queue": {"name": "mail", "limit": "2"},
    "jobs runs cancel": {"run_ids": "1"}, "jobs runs retry": {"run_ids": "2"}, "jobs runs show": {"run_id": "1"},
    "jobs users create": {"email": "shell@example.com", "password": "a much longer password 42"},
    "jobs users reset-password": {"email": "other@example.com", "password": "a much longer password 42"},
    "jobs users deactivate": {"email": "other@example.com"}, "jobs users reactivate": {"email": "other@example.com"},
    "jobs users unlock": {"email": "other@example.com"},
}
# Not fuzzed: `flask dev` starts a web server and a worker, and its host goes to gunicorn, which
# refuses a bad one in a process of its own (a NUL is refused before anything, and is fuzzed);
# `flask jobs exec`'s command is the user's own, run as the bytes the shell gave (an OS's argv
# holds no NUL).
SKIPPED = {("dev", "long"), ("dev", "not_utf8"), ("jobs exec command", "nul"), ("jobs exec command", "long"),
           ("jobs exec command", "not_utf8")}
# A command that only forgets what was recorded for a name: one never recorded is 0 forgotten
# (exit 0), whatever its length; its one row is its audit entry, the shell user's command as typed.
LOOKUPS = {("jobs users unlock", "email"), ("jobs users unlock", "address")}
# Where the message names the parameter by another word than its name: `jobs queue NAME`'s and
# run-jobs --queues' queue, the run ids' metavar.
ALSO_NAMED = {"name": "queue:", "queues": "queue:", "run_ids": "[RUN_ID]"}


def commands(app):
    """{"jobs define": the click command} for every command of jobsweb's (the `users` group is
    `jobs users` again)."""
    found = {}

    def walk(command, path):
        if isinstance(command, click.Group):
            context = click.Context(command)
            for name in command.list_commands(context):
                walk(command.get_command(context, name), [*path, name])
        else:
            found[" ".join(path)] = command

    for name, command in app.cli.commands.items():
        if name != "users":
            walk(command, [name])
    return found


def argv(path, command, values):
    """The command line of `command` with `values` ({param name: text})."""
    line = path.split()
    for param in command.params:
        if param.name not in values:
            continue
        if isinstance(param, click.Argument):
            line += ["--", values[param.name]] if param.nargs == -1 and param.name == "command" else [values[param.name]]
        else:
            line += [param.opts[0], values[param.name]]
    return line


@pytest.fixture
def shell(app, sql, make_user):
    """What the commands act on: a definition, an external one, a queue, runs, a batch, a user."""
    from jobsweb import batch, enqueue

    make_user("viewer", "other@example.com")
    define(app, "nightly")
    define(app, "watched", job_type=None, external=True)
    sql("INSERT INTO job_queues (name) VALUES ('mail')")
    with committed(app):
        enqueue("jobsweb.noop", {}, delay=3600)
        with batch(on_finish="jobsweb.noop") as made:
            made.enqueue("jobsweb.noop", {})
    return app.test_cli_runner()


def test_every_option_and_argument_of_every_command_refuses_bad_input_in_one_line_naming_it(app, shell, sql):
    failures, ran = [], 0
    for path, command in sorted(commands(app).items()):
        values = VALID.get(path, {})
        for param in command.params:
            if getattr(param, "is_flag", False):
                continue
            for kind, bad in {"nul": NUL, "long": LONG, "not_utf8": ARGV_NOT_UTF8}.items():
                if (path, kind) in SKIPPED or (f"{path} {param.name}", kind) in SKIPPED:
                    continue
                before = snapshot(sql)
                result = shell.invoke(args=argv(path, command, {**values, param.name: bad}))
                ran += 1
                said = result.output.strip().splitlines()[-1] if result.output.strip() else ""
                words = {param.name, param.name.upper(), *getattr(param, "opts", ()), ALSO_NAMED.get(param.name, param.name)}
                after = snapshot(sql)
                written = after != before
                if ((path, param.name) in LOOKUPS and result.exit_code == 0
                        and [t for t in WATCHED if after[t] != before[t]] == ["jobsweb_audit_log"]):
                    continue
                if (result.exit_code not in (1, 2) or not isinstance(result.exception, SystemExit)
                        or "Traceback" in result.output or not said.startswith("Error: ")
                        or not any(word in said for word in words) or written):
                    failures.append(f"{path} {param.name} {kind}: exit {result.exit_code}, "
                                    f"{type(result.exception).__name__}, said {said[:150]!r}")
    print(f"{ran} command lines", *failures, sep="\n")
    assert failures == [] and ran > 150
