"""The dashboard: what needs attention first, then the state of the queue."""

from flask import Blueprint, current_app, url_for

from ..core.database import execute
from ..engine.link import NO_JIT
from ..ops import alerts, deploy_marks, fleet, queue_stats, stats
from ..scheduling import definitions
from .rendering import render, time_ago

bp = Blueprint("dashboard", __name__)

EXTERNAL_SHOWN = 20  # external definitions listed with their last report


def attention(incidents=()):
    """Overdue and failing definitions, in words a person can act on; those with an open
    incident of that kind are left out (the dashboard lists open incidents above)."""
    items = []
    for problem in definitions.problems(skip={(i.definition_id, i.kind) for i in incidents}):
        d, run = problem.definition, problem.run
        if problem.kind == "failing":
            items.append({"url": url_for("jobsweb.runs.index", definition=d.id, status="dead"), "name": d.name,
                          "words": f"{definitions.failed_last(d.failure_count)}: open "
                                   f"{'it' if d.failure_count == 1 else 'them'} to see why."})
        elif d.external:
            slot = d.next_run_at if run is None else run.scheduled_for
            items.append({"url": url_for("jobsweb.definitions.detail", definition_id=d.id), "name": d.name,
                          "words": f"(external) was due {time_ago(slot)} and has not reported: is its crontab "
                                   "line or script still running?"})
        elif run is None:
            items.append({"url": url_for("jobsweb.definitions.detail", definition_id=d.id), "name": d.name,
                          "words": f"should have run {time_ago(d.next_run_at)} and nothing of it is queued "
                                   "or running: is cron or a worker running?"})
        else:
            items.append({"url": url_for("jobsweb.runs.detail", run_id=run.id), "name": d.name,
                          "words": f"has a run due {time_ago(run.run_at)} that no worker has taken: is a worker "
                                   f"running that handles {d.job_type}?"})
    return items


@bp.get("/")
def index():
    """Counts, queue depth, problems and the last 24 hours; htmx refreshes the body."""
    # Its counts over job_runs are estimated past jit_above_cost at a million runs, and a stock
    # server then JIT-compiles them on every view: milliseconds of compiling for reads that take
    # less. This request's transaction only.
    execute(NO_JIT)
    incidents = alerts.open_incidents()
    overview = stats.overview()
    # Held runs by the pause that holds each ("6 in paused queue reports; 332 of paused job type
    # search.reindex_user"), and the live workers by the Workers page's rule, quiet ones marked.
    overview["pauses"] = queue_stats.held_by_pause() if overview["held"] else []
    overview["workers"] = fleet.live_workers(current_app.config)
    return render("dashboard.html", "partials/_dashboard.html", **overview,
                  marks=deploy_marks.for_chart(overview["chart"]), attention=attention(incidents), open_incidents=incidents,
                  externals=definitions.external_definitions(EXTERNAL_SHOWN))
