"""pytest fixtures for the tests of an app that uses jobsweb. In the app's conftest.py:

    pytest_plugins = ["jobsweb.pytest_plugin"]

They use the app's own `app` fixture (its test app, on its test database)."""

import pytest

from .testing import create_schema, empty_tables


@pytest.fixture
def jobsweb_tables(app):
    """jobsweb's tables in the test database, created or upgraded once and emptied for each test
    (nothing to do in inline mode, JOBSWEB_INLINE, which stores no runs)."""
    if not app.config["JOBSWEB_INLINE"]:
        with app.app_context():
            create_schema()
            empty_tables()
    yield
