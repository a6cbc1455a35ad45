"""jobsweb as a Flask extension, for a team's own app or for jobsweb's standalone app:

    jobs = JobsWeb()
    jobs.init_app(app, url_prefix="/admin/jobs", authorize=who_is_signed_in)

It reads its settings from `app.config["JOBSWEB_..."]` (the environment as fallback), works
through the app's own Flask-SQLAlchemy (jobsweb's own when the app has none), adds
`flask run-jobs` and `flask jobs ...` to the app's CLI, and mounts the admin screen under
`url_prefix`. Nothing it adds reaches beyond its blueprint: the app's routes, sessions, error
pages and request hooks stay the app's. Handlers run in the app's context, so they can use the
app's models, config and extensions. In a process serving the app (not in `flask` commands or
test apps) a thread evaluates alerts (ops/web_alerts.py; JOBSWEB_WEB_ALERTS=false turns it off).
"""

from . import commands
from .core import database, schema, settings
from .core.errors import ConfigError
from .engine.jobs import builtin_jobs, registry  # noqa: F401 - importing builtin_jobs registers jobsweb.noop/sleep/fail
from .ops import retention  # noqa: F401 - importing it registers jobsweb.prune
from .ops import web_alerts
from .web import site

DEFAULT_PREFIX = "/jobs"


class JobsWeb:
    """The extension: `JobsWeb(app, ...)` or `JobsWeb()` then `init_app(app, ...)`."""

    def __init__(self, app=None, **options):
        if app is not None:
            self.init_app(app, **options)

    def init_app(self, app, url_prefix=DEFAULT_PREFIX, authorize=None):
        """Set jobsweb up on `app`; the admin screen at `url_prefix` ("" for the site's root).

        `authorize`: a callable the admin screen calls in each request, returning None (nobody
        signed in) or (identity, role) with role viewer, operator or admin; without it, jobsweb's
        own users sign in on its own page.
        """
        app.config.update(settings.resolve(app.config))
        settings.check(app.config)
        _check_secret_key(app)
        if "sqlalchemy" not in app.extensions and not app.config.get("SQLALCHEMY_DATABASE_URI"):
            raise ConfigError("jobsweb needs a database: set SQLALCHEMY_DATABASE_URI in the app's config or "
                              "DATABASE_URL in the environment (postgresql://user:password@host:5432/dbname)")
        database.init_app(app)
        schema.hide_from_host_autogenerate(app)
        registry.load(app.config["JOBSWEB_HANDLERS"])
        commands.init_app(app)
        site.init_app(app, url_prefix, authorize)
        app.extensions["jobsweb"] = self
        # Alerts fire with no worker running: each process serving the app evaluates them too.
        app.extensions["jobsweb_web_alerts"] = web_alerts.start_if_serving(app)


def _check_secret_key(app):
    """Stop at start without a SECRET_KEY (the app's config, else the environment): the admin
    screen's sessions and CSRF tokens are signed with it, and without one the sign-in page was a
    500. A short key is refused too, as the standalone app refuses it, except in a test app
    (TESTING), whose key guards nothing."""
    key = app.config.get("SECRET_KEY")
    if not key:
        raise ConfigError("SECRET_KEY is not set: jobsweb signs its sessions and CSRF tokens with it. Set it in the "
                          f"app's config or the environment, {settings.SECRET_KEY_MIN_CHARS}+ characters "
                          "(e.g. from `openssl rand -hex 32`)")
    if not app.testing:
        settings.check_secret_key(key)
