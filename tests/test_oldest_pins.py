"""The oldest versions jobsweb supports (pyproject.toml's lower bounds: Flask 3.0.0, Werkzeug
3.0.0, SQLAlchemy 2.0.16, Flask-SQLAlchemy 3.1.0, psycopg 3.2.1), beside what a typical host
pins (psycopg2-binary, gunicorn 21.2.0): examples/requirements-oldest.txt, installed by `make
test` into .cache/venv-oldest. The example host app's tests run there, as a separate pytest
process on this suite's server, on both drivers (all but the browser test: that venv has no
Playwright; the pages are served to its test clients), and the schedule rules' tests."""

import os
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a second pytest process (~1 min)

OLDEST_PYTHON = ROOT / ".cache" / "venv-oldest" / "bin" / "python"


def installed_versions():
    listed = subprocess.run([OLDEST_PYTHON, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout
    return dict(line.lower().replace("_", "-").split("==") for line in listed.splitlines() if "==" in line)


def test_the_host_app_tests_pass_on_the_oldest_supported_versions_beside_gunicorn_21(postgres_server):
    assert OLDEST_PYTHON.exists(), "run `make .cache/venv-oldest/.installed` first (make test does)"
    pins = [line for line in (ROOT / "examples" / "requirements-oldest.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")]
    versions = installed_versions()
    for pin in pins:
        name, version = pin.lower().replace("_", "-").split("==")
        assert versions[name.split("[")[0]] == version, pin
    admin, _ = postgres_server
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JOBSWEB_", "PYTHON"))}
    # This suite's server, with a test database of the child's own (this session's stays as it is).
    env.update(TEST_DATABASE_URL=admin, TEST_DATABASE_NAME="jobsweb_test_oldest")
    # And the schedule rules, which lean on croniter's and cron-descriptor's oldest versions.
    result = subprocess.run([OLDEST_PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_host_app.py",
                             "tests/test_schedule.py", "-k", "not chromium"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1] and "skipped" not in result.stdout.splitlines()[-1]
