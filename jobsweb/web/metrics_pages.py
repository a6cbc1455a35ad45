"""The metrics page: each job type's attempts, failures, durations and waits over a window, and
a chart of attempts over it (ops/job_type_metrics.py counts them)."""

from datetime import datetime, timedelta, timezone

from flask import Blueprint, abort, flash, request, url_for

from ..core.database import db, execute
from ..core.errors import InvalidInput
from ..engine.link import NO_JIT
from ..ops import deploy_marks, job_type_metrics
from ..ops.job_type_metrics import WINDOWS
from . import audit, charts
from .access import role_required, viewer
from .rendering import redirect_to, render
from .runlist import text_filter

bp = Blueprint("job_metrics", __name__)

DEFAULT_WINDOW = "24h"
# Seconds a view spends adding attempts to the rollup before it answers with what is counted:
# only the first views after an upgrade (a week of attempts) or a long quiet spell need more.
SEAL_BUDGET = 1.0
BEHIND = timedelta(minutes=1)  # counted up to longer ago than this: the page says so
# Column key -> (heading, what it sorts by); the first order of a column is descending except
# for the job type's name.
COLUMNS = {
    "job_type": ("Job type", lambda f: f.job_type),
    "runs": ("Runs", lambda f: f.runs),  # runs that ended
    "attempts": ("Attempts", lambda f: f.attempts),
    "failures": ("Failed", lambda f: f.failures),
    "failure_rate": ("Failure rate", lambda f: f.failure_rate),
    "p50": ("p50 duration", lambda f: f.p50 or 0.0),
    "p95": ("p95 duration", lambda f: f.p95 or 0.0),
    "wait_p95": ("p95 wait", lambda f: f.wait_p95 or 0.0),
}
# How many bars carry a label on each window's chart; the week's are dated.
LABEL_EVERY = {"1h": 10, "24h": 6, "7d": 6}


def short_seconds(value):
    """A percentile in words: '4.5 ms', '1.2 s', '3.5 min', '2.1 h'; past the last bound, 'over'."""
    if value is None:
        return "—"
    if value == float("inf"):
        return f"over {job_type_metrics.BOUNDS[-1] / 3600:.0f} h"
    for limit, size, unit in ((1, 0.001, "ms"), (120, 1, "s"), (7200, 60, "min"), (None, 3600, "h")):
        if limit is None or value < limit:
            return f"{value / size:.2g} {unit}" if value / size < 10 else f"{value / size:.0f} {unit}"


def _choice(name, allowed, default, values=None):
    """`name` from the query string (or `values`, a form), one of `allowed`; else a 400 naming it."""
    value = (request.args if values is None else values).get(name, "").strip() or default
    if value not in allowed:
        abort(400, f"{name}: {value[:40]!r} is not one of {', '.join(allowed)}.")
    return value


@bp.get("/job-metrics")
def index():
    """Per job type (or per queue, ?by=queue): runs, attempts, failures, p50/p95 duration and
    p95 wait over the chosen window, sortable, each linked to its runs; a chart of attempts for
    all or the chosen one."""
    window = WINDOWS[_choice("window", WINDOWS, DEFAULT_WINDOW)]
    by = _choice("by", job_type_metrics.BY, "job_type")
    sort = _choice("sort", COLUMNS, "runs")
    order = _choice("order", ("asc", "desc"), "asc" if sort == "job_type" else "desc")
    chosen = text_filter(request.args, by) or None  # the job type (or queue) charted
    counted_until = job_type_metrics.seal(SEAL_BUDGET)
    # A week of rows is summed here: cheap, but past jit_above_cost on a stock server, where
    # compiling would cost more than the read. This request's (read-only) transaction only.
    execute(NO_JIT)
    figures, since = job_type_metrics.figures(window, by)
    behind = counted_until is None or datetime.now(timezone.utc) - counted_until > BEHIND
    figures.sort(key=COLUMNS[sort][1], reverse=order == "desc")
    chart = job_type_metrics.chart(window, since, chosen, by)
    marks, every, dated = deploy_marks.for_chart(chart), LABEL_EVERY[window.key], window.key == "7d"
    # By queue, every queue at once: a line each (the busiest SERIES_SHOWN), not one sum of them all.
    lines = job_type_metrics.series(window, since, by) if by == "queue" and not chosen else {}
    drawings = {width: (charts.series_chart(chart, lines, every, dated, marks, width) if lines
                        else charts.hour_chart(chart, every, dated, marks, width)) for width in (charts.WIDE, charts.WIDTH)}
    return render("job_metrics.html", "partials/_job_metrics.html", window=window, windows=WINDOWS,
                  figures=figures, since=since, sort=sort, order=order, columns=COLUMNS, chosen=chosen, by=by,
                  chart=chart, drawings=drawings, seconds=short_seconds, behind=behind, counted_until=counted_until,
                  dated=dated)


@bp.post("/job-metrics/deploys")
@role_required("admin")
def mark_deploy():
    """Record a deploy now, labelled as typed (`flask jobs mark-deploy`'s rule: deploy_marks.mark),
    audited as the CLI's is, and go back to the chart that draws it."""
    window = _choice("window", WINDOWS, DEFAULT_WINDOW, request.form)  # the chart to go back to: checked first
    label = request.form.get("label", "").strip()
    try:
        marked_id, marked_at = deploy_marks.mark(label, by=viewer().identity)
    except InvalidInput as exc:
        abort(400, f"Deploy not marked: {exc.field} {exc.message}.")
    audit.record("mark_deploy", "deploy", marked_id, label=label)
    db.session.commit()
    flash(f"Deploy {label} marked at {marked_at:%Y-%m-%d %H:%M:%S} UTC.")
    return redirect_to(url_for("jobsweb.job_metrics.index", window=window) + "#throughput")
