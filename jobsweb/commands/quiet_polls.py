"""`flask dev`'s access log: gunicorn's, without the refreshes htmx sends every few seconds.

An open dashboard and a Live runs list wrote a line every 3 s each, and the worker's lines
about the demo runs scrolled away under them. Requests that fail (4xx, 5xx) are still logged.
"""

from gunicorn.glogging import Logger


class QuietPollsLogger(Logger):
    """gunicorn's Logger, leaving out successful htmx GETs (polls, filter updates)."""

    def access(self, resp, req, environ, request_time):
        if (environ.get("HTTP_HX_REQUEST") == "true" and req.method == "GET"
                and resp.status_code is not None and int(resp.status_code) < 400):
            return
        super().access(resp, req, environ, request_time)
