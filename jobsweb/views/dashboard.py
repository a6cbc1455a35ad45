"""The dashboard: what needs attention first, then the state of the queue."""

from flask import Blueprint

from .. import stats
from ..web import render

bp = Blueprint("dashboard", __name__)


@bp.get("/")
def index():
    """Counts, queue depth, problems and the last 24 hours; htmx refreshes the body."""
    return render("dashboard.html", "partials/_dashboard.html", **stats.overview())
