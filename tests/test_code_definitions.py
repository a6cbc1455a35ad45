"""Schedules declared in code with @job(..., schedule=...) and written by `flask jobs sync`
(issue 12, part 8)."""

import pytest

from jobsweb import InvalidInput, job
from tests.conftest import committed, define

pytestmark = pytest.mark.usefixtures("registry_snapshot")


def declare(name="report", **options):
    options.setdefault("schedule", "0 6 * * *")

    @job(name, **options)
    def report(ctx):
        return {"rows": 3}

    return report


def sync(runner):
    result = runner.invoke(args=["jobs", "sync"])
    return result.exit_code, result.output


def test_a_code_declared_schedule_synced_twice_gives_one_definition(runner, sql):
    declare(timezone="Europe/Madrid", payload={"to": "ops"}, overlap="queue", misfire="all", grace_seconds=60)
    assert sync(runner) == (0, "report: created\n")
    [(slot,)] = sql("SELECT next_run_at FROM job_definitions")
    assert sync(runner) == (0, "report: unchanged\n")
    assert sql("SELECT name, job_type, schedule, timezone, payload, overlap_policy, misfire_policy, "
               "grace_seconds, enabled, source, next_run_at FROM job_definitions") == [
        ("report", "report", "0 6 * * *", "Europe/Madrid", {"to": "ops"}, "queue", "all", 60, True, "code", slot)]


def test_a_changed_declaration_is_updated_and_an_unchanged_schedule_keeps_its_slot(runner, sql):
    declare(payload={"v": 1})
    sync(runner)
    sql("UPDATE job_definitions SET next_run_at = now() + interval '1 second'")  # a slot about to fall
    [(slot,)] = sql("SELECT next_run_at FROM job_definitions")
    declare(payload={"v": 2})
    assert sync(runner) == (0, "report: updated\n")
    assert sql("SELECT payload, next_run_at FROM job_definitions") == [({"v": 2}, slot)]
    declare(payload={"v": 2}, schedule="0 7 * * *")
    assert sync(runner) == (0, "report: updated\n")
    assert sql("SELECT extract(hour FROM next_run_at AT TIME ZONE 'UTC') FROM job_definitions") == [(7,)]


def test_a_paused_synced_definition_stays_paused_after_sync(runner, sql):
    declare(payload={"v": 1})
    sync(runner)
    assert runner.invoke(args=["jobs", "pause", "report"]).exit_code == 0
    assert sync(runner) == (0, "report: unchanged (paused)\n")
    declare(payload={"v": 2})
    assert sync(runner) == (0, "report: updated (paused)\n")
    assert sql("SELECT enabled, payload FROM job_definitions") == [(False, {"v": 2})]


def test_an_admin_made_definition_is_never_touched_by_sync(app, runner, sql):
    define(app, "nightly", job_type="jobsweb.noop", payload={"by": "admin"})
    before = sql("SELECT * FROM job_definitions")
    declare()
    assert sync(runner) == (0, "report: created\n")
    assert sql("SELECT * FROM job_definitions WHERE name = 'nightly'") == before
    assert sql("SELECT source FROM job_definitions WHERE name = 'nightly'") == [("admin",)]


def test_a_declaration_named_like_an_admin_made_definition_is_refused_and_nothing_is_written(app, runner, sql):
    define(app, "report", job_type="jobsweb.noop")
    before = sql("SELECT * FROM job_definitions")
    declare("report")
    declare("other")
    code, output = sync(runner)
    assert code == 2
    assert "name: 'report' is a definition made in the admin screen" in output and "(in @job('report'))" in output
    assert "Traceback" not in output
    assert sql("SELECT * FROM job_definitions") == before


def test_a_removed_declaration_is_disabled_and_marked_and_its_runs_kept(app, runner, sql, registry_snapshot):
    from jobsweb.engine.jobs import registry
    from jobsweb.scheduling import definitions

    declare("report")
    declare("cleanup", schedule="@every 10m")
    sync(runner)
    with committed(app):
        run_id = definitions.run_now("report")
    del registry._registry["report"]  # the declaration left the code
    assert sync(runner) == (0, "cleanup: unchanged\nreport: disabled: no longer declared in code; kept with its runs\n")
    assert sql("SELECT name, enabled, source FROM job_definitions ORDER BY name") == [
        ("cleanup", True, "code"), ("report", False, "code-removed")]
    assert sql("SELECT id FROM job_runs") == [(run_id,)]
    assert sync(runner) == (0, "cleanup: unchanged\n")  # disabled once

    declare("report")  # back in the code: owned by sync again, but resuming is a person's call
    code, output = sync(runner)
    assert code == 0 and output.startswith("cleanup: unchanged\nreport: declared again; still disabled")
    assert sql("SELECT enabled, source FROM job_definitions WHERE name = 'report'") == [(False, "code")]


def test_sync_with_a_bad_declaration_fails_naming_the_field_and_writes_nothing(app, runner, sql):
    declare("report")
    declare("huge", payload={"blob": "x" * (app.config["JOBSWEB_MAX_PAYLOAD_BYTES"] + 1)})
    code, output = sync(runner)
    assert code == 2 and "payload: is " in output and "(in @job('huge'))" in output
    assert "Traceback" not in output
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


@pytest.mark.parametrize("options, field", [
    ({"schedule": "0 6 * *"}, "schedule"),
    ({"schedule": "61 * * * *"}, "schedule"),
    ({"timezone": "Mars/Base"}, "timezone"),
    ({"overlap": "sometimes"}, "overlap"),
    ({"misfire": "never"}, "misfire"),
    ({"grace_seconds": -1}, "grace_seconds"),
    ({"payload": [1, 2]}, "payload"),
    ({"alert_webhook_url": "ftp://example.com"}, "alert_webhook_url"),
    ({"schedule": None, "timezone": "UTC"}, "schedule"),
])
def test_a_bad_declaration_fails_at_import_naming_the_field(options, field):
    with pytest.raises(InvalidInput) as caught:
        declare("report", **options)
    assert caught.value.field == field and "(in @job('report'))" in caught.value.message


def test_an_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="shedule"):
        declare("report", shedule="@daily")


def test_sync_says_when_nothing_declares_a_schedule(runner):
    assert sync(runner) == (0, "no job type declares a schedule in code (are the modules with @job imported?)\n")


def test_the_admin_shows_which_definitions_come_from_code(app, runner, sign_in, sql, registry_snapshot):
    from jobsweb.engine.jobs import registry

    declare("report")
    declare("gone")
    define(app, "nightly", job_type="jobsweb.noop")
    sync(runner)
    del registry._registry["gone"]
    sync(runner)
    client = sign_in("admin")
    listing = client.get("/definitions").get_data(as_text=True)
    assert listing.count(">from code</span>") == 1
    assert listing.count(">no longer in the code: disabled</span>") == 1
    ids = dict(sql("SELECT name, id FROM job_definitions"))

    page = client.get(f"/definitions/{ids['report']}").get_data(as_text=True)
    assert "from code" in page and "flask jobs sync</code> writes it" in page
    page = client.get(f"/definitions/{ids['gone']}").get_data(as_text=True)
    assert "declared in code, no longer in the code: disabled" in page
    page = client.get(f"/definitions/{ids['nightly']}").get_data(as_text=True)
    assert "from code" not in page and "no longer in the code" not in page

    form = client.get(f"/definitions/{ids['report']}/edit").get_data(as_text=True)
    assert "the next <code>flask jobs sync</code> (at the next release) overwrites the changes" in form
    form = client.get(f"/definitions/{ids['nightly']}/edit").get_data(as_text=True)
    assert "flask jobs sync" not in form


def test_the_next_sync_overwrites_an_edit_made_in_the_admin(app, runner, sql):
    from jobsweb.scheduling import definitions

    declare(payload={"v": 1})
    sync(runner)
    with committed(app):  # what the definition form's save does
        definitions.define("report", "report", "0 6 * * *", payload={"edited": True})
    assert sql("SELECT payload, source FROM job_definitions") == [({"edited": True}, "code")]
    assert sync(runner) == (0, "report: updated\n")
    assert sql("SELECT payload FROM job_definitions") == [({"v": 1},)]


def test_what_sync_creates_updates_and_disables_is_audited_and_what_it_leaves_is_not(runner, sql):
    declare(payload={"v": 1})
    sync(runner)
    sync(runner)
    declare(payload={"v": 2})
    sync(runner)
    from jobsweb.engine.jobs import registry

    registry._registry.pop("report")
    assert sync(runner)[0] == 0
    assert sql("SELECT user_email LIKE 'cli:%%', action, detail FROM jobsweb_audit_log ORDER BY id") == [
        (True, "sync_created", {"name": "report"}), (True, "sync_updated", {"name": "report"}),
        (True, "sync_disabled", {"name": "report"})]
