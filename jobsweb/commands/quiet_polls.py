"""`flask dev`'s access log: gunicorn's, without the refreshes htmx sends every few seconds
and without the static files each page loads.

An open dashboard and a Live runs list wrote a line every 3 s each, and every page view six
more for its stylesheet, scripts and icon (1,216 lines in 12 minutes of browsing): the worker's
lines about the demo runs scrolled away under them. Requests that fail (4xx, 5xx) are still logged.
"""

from gunicorn.glogging import Logger

# Where the admin screen's own files are served (web/site.py): its static folder and htmx's.
ASSET_PATHS = ("/static/", "/vendor/")


class QuietPollsLogger(Logger):
    """gunicorn's Logger, leaving out successful htmx GETs (polls, filter updates) and static files."""

    def access(self, resp, req, environ, request_time):
        if (req.method == "GET" and resp.status_code is not None and int(resp.status_code) < 400
                and (environ.get("HTTP_HX_REQUEST") == "true" or environ.get("PATH_INFO", "").startswith(ASSET_PATHS))):
            return
        super().access(resp, req, environ, request_time)
