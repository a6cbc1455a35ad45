"""gunicorn settings for jobsweb's web processes, shipped in the wheel: a host app serving
jobsweb under gunicorn uses them with `gunicorn -c python:jobsweb.gunicorn_conf app:app`; this
repository's ./gunicorn.conf.py (which gunicorn reads by itself) is these.

Every value comes from the environment a PaaS sets, with defaults for a single small host.
"""

import os

from jobsweb.core.database import check_database_url, database_url
from jobsweb.core.errors import ConfigError
from jobsweb.core.logs import gunicorn_logging


def _whole(name, default):
    """A whole number from the environment. (gunicorn itself parses WEB_CONCURRENCY before this
    file is read, so a value that is not a number stops it with its own traceback.)"""
    raw = os.environ.get(name, "").strip() or str(default)
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"{name} must be a whole number of at least 1, got {raw!r}")
    return int(raw)


def _check_database_url():
    """Stop gunicorn, in one line, if DATABASE_URL is set and is not PostgreSQL: every page of
    jobsweb needs it, and once the app is loaded a refusal is a worker's boot traceback."""
    raw = os.environ.get("DATABASE_URL", "").strip()
    if raw:
        try:
            check_database_url("DATABASE_URL", database_url(raw), postgresql=True)
        except ConfigError as exc:
            raise SystemExit(exc.message) from None


# The PaaS router connects to $PORT on every interface; locally, 8000.
bind = [f"0.0.0.0:{_whole('PORT', 8000)}"]
# Processes serving requests. Each holds up to WEB_THREADS + 1 database connections (one per
# thread, one for its alert thread); docs/DEPLOY.md ("Database connections") adds up the rest.
workers = _whole("WEB_CONCURRENCY", 2)
# Threaded workers: a slow client (or two) holds one thread, not a whole process; with sync
# workers two slow anonymous connections stalled the site. Threads stay under the 5 pooled
# database connections of each process. Each request at most `timeout`: the admin's heaviest
# page (a bulk action over everything matching a filter) commits in batches and finishes well within it.
worker_class = "gthread"
threads = _whole("WEB_THREADS", 4)
timeout = 60  # seconds
graceful_timeout = 20  # seconds a deploy gives in-flight requests after SIGTERM
# One access-log line per request on stdout, where a PaaS collects logs; errors on stderr.
accesslog = "-"
errorlog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'
# gunicorn's lines and the app's in jobsweb's format (JOBSWEB_LOG_FORMAT, text or json), with
# the control characters of a request line or a webhook's reply escaped.
logconfig_dict = gunicorn_logging()  # first: it names a typo in any JOBSWEB_* variable
_check_database_url()
# The router terminates TLS and says so in X-Forwarded-Proto: gunicorn believes it from these
# addresses only (FORWARDED_ALLOW_IPS, gunicorn's own variable; "*" when the router's address
# is not fixed, which is safe only if nothing else can reach $PORT). The app itself reads the
# X-Forwarded-* headers through ProxyFix when JOBSWEB_PROXY_HOPS is set (see docs/DEPLOY.md).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
# gunicorn 24+ opens a control socket in ~/.gunicorn, one path per user: two apps on one host
# would share it. jobsweb does not use it. (Older gunicorns ignore the setting.)
control_socket_disable = True


def post_worker_init(worker):
    """Each web process checks its database once after loading the app and before its first
    request (at most a few seconds: web/probes.py, WARM_WAIT), so that its first /healthz finds
    a connection open: that probe connecting and reading the migrations inside its 1.5 s
    answered 503 from a healthy database on a loaded machine. A host's own gunicorn settings
    file gets the same with `from jobsweb.gunicorn_conf import post_worker_init`."""
    from jobsweb.web.probes import warm_process  # the worker has imported the app: nothing new

    warm_process()
