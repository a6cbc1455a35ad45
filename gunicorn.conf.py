"""gunicorn settings for `gunicorn wsgi:app` (gunicorn reads ./gunicorn.conf.py by itself):
jobsweb's, from the package (jobsweb/gunicorn_conf.py), so a host gets the same ones."""

from jobsweb.gunicorn_conf import *  # noqa: F401,F403
