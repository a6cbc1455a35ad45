"""A cron tick (`flask run-jobs`, once a minute in crontab mode) imports what it runs: not
Alembic and Flask-Migrate (with Mako and Pygments), nor the modules of the commands it is not,
and leaves what it imported out of its collections (docs/BENCHMARKS.md §20 has what each cost in
time)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from jobsweb.core.database import libpq_url
from tests.conftest import SECRET_KEY

ROOT = Path(__file__).resolve().parent.parent
# `flask --app APP run-jobs` run in one process, as crontab runs it, then REPORT (a Python
# expression, read in that process once the tick is over) printed as JSON.
TICK = """
import gc, json, sys
from flask.cli import main
sys.argv = ["flask", "--app", APP, "run-jobs"]
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
print(json.dumps(REPORT))
"""
NOT_FOR_A_TICK = ("alembic", "flask_migrate", "mako", "pygments", "jobsweb.ops.command_runs",
                  "jobsweb.commands.exec_commands", "jobsweb.commands.job_commands", "jobsweb.commands.run_commands",
                  "jobsweb.commands.schedule_commands", "jobsweb.commands.user_commands")


def tick(database_url, app_path, report):
    """One cron tick of `app_path` with the stock settings (none of the tests' own handler
    modules) in a process of its own: what `report` came to there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBSWEB_", "FLASK_"))}
    env.update(DATABASE_URL=libpq_url(database_url), SECRET_KEY=SECRET_KEY)
    script = TICK.replace("APP", repr(app_path)).replace("REPORT", report)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_cron_tick_runs_its_due_run_without_importing_migrations_or_other_commands(app, sql,
                                                                                       database_url_for_tests):
    [(run_id,)] = sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop') RETURNING id")
    modules = tick(database_url_for_tests, "wsgi", "sorted(sys.modules)")
    assert sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("succeeded",)]
    assert "jobsweb.engine.worker.loop" in modules  # it did import what it ran
    assert [m for m in modules if m.split(".")[0] in NOT_FOR_A_TICK or m in NOT_FOR_A_TICK] == []


def test_a_cron_ticks_imports_and_app_are_left_out_of_its_collections_and_its_exit(app, database_url_for_tests):
    # Before: ~100,000 objects walked again by the collection at exit, which took longer than an
    # empty tick's own work, and a full collection while importing. Read: objects frozen, objects
    # left for the interpreter's last collection at exit, and full collections.
    report = "[gc.get_freeze_count(), len(gc.get_objects()), gc.get_stats()[2]['collections']]"
    # The standalone app (wsgi.py), and a host's own app, which builds it its own way.
    for app_path, full_collections in (("wsgi", [0]), ("jobsweb:create_app()", [0, 1])):
        frozen, left, full = tick(database_url_for_tests, app_path, report)
        assert frozen > 50_000 and left < 20_000, (app_path, frozen, left)
        assert full in full_collections, app_path


def test_the_standalone_apps_flask_db_is_set_up_when_asked_for(app):
    from flask_migrate import _MigrateConfig

    from jobsweb.core.package_files import resource

    # (Alembic prints the revision to the sys.stdout it found when imported: not the runner's.)
    result = app.test_cli_runner().invoke(args=["db", "current"])
    assert result.exit_code == 0, result.output
    config = app.extensions["migrate"]
    assert isinstance(config, _MigrateConfig) and config.directory == str(resource("migrations"))


def test_a_tick_on_a_database_never_migrated_says_to_migrate_it(scratch_database):
    from jobsweb import create_app

    url = scratch_database("jobsweb_tick_unmigrated", revision=None)
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET_KEY})
    result = app.test_cli_runner().invoke(args=["run-jobs"])
    assert result.exit_code == 1
    assert result.output == ("Error: the jobsweb tables do not exist in this database: "
                             "run `flask jobs migrate` first.\n")
