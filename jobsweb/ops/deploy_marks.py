"""Deploy marks: a release's label and time (`flask jobs mark-deploy`), drawn on the dashboard's
and the metrics page's charts, so that a change in failures lines up with the deploy that brought
it (Sidekiq's deploy markers). Migration 0030 makes the table."""

from ..core.database import execute
from ..core.errors import InvalidInput, clean_text

LABEL_MAX_CHARS = 100
SHOWN = 50  # marks drawn on one chart at most: a chart of 24 bars has no room for more

MARK = """
INSERT INTO jobsweb_deploy_marks (label, marked_by) VALUES (%(label)s, %(by)s)
RETURNING id, marked_at
"""

# The marks in a chart's window, oldest first. Uses index jobsweb_deploy_marks_at.
WITHIN = """
SELECT marked_at, label FROM jobsweb_deploy_marks
WHERE marked_at >= %(start)s AND marked_at < %(end)s
ORDER BY marked_at
LIMIT %(limit)s
"""


# What a release phase knows of the release, in the order read: the first set labels the mark
# when `flask jobs mark-deploy` is given none. Heroku sets SOURCE_VERSION at build time only; its
# release phase has HEROKU_RELEASE_VERSION (v42) and HEROKU_SLUG_COMMIT once dyno metadata is on
# (`heroku labs:enable runtime-dyno-metadata`). Render's pre-deploy command has RENDER_GIT_COMMIT,
# Railway's RAILWAY_GIT_COMMIT_SHA, Fly's release_command machine FLY_IMAGE_REF (its tag is read).
RELEASE_VARIABLES = ("SOURCE_VERSION", "HEROKU_RELEASE_VERSION", "HEROKU_SLUG_COMMIT", "RENDER_GIT_COMMIT",
                     "RAILWAY_GIT_COMMIT_SHA", "FLY_IMAGE_REF")


def release_label(environ):
    """(label, the variable it came from) of the first of RELEASE_VARIABLES set in `environ`, or
    (None, None). FLY_IMAGE_REF gives its tag (registry.fly.io/app:deployment-01H9... gives
    deployment-01H9...), which fits in LABEL_MAX_CHARS where the whole reference may not."""
    for name in RELEASE_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            return (value.rpartition(":")[2] if name == "FLY_IMAGE_REF" else value), name
    return None, None


def mark(label, by):
    """Record a deploy labelled `label` (a version, a commit) by `by`, now; (id, marked_at). The
    caller commits. InvalidInput naming `label` when it is empty, too long or holds a control
    character."""
    label = clean_text("label", label.strip())
    if not label:
        raise InvalidInput("label", "must not be empty: a version or a commit, e.g. v1.2 or 3f2c9e1")
    if len(label) > LABEL_MAX_CHARS:
        raise InvalidInput("label", f"must be at most {LABEL_MAX_CHARS} characters")
    return execute(MARK, {"label": label, "by": by}).one()


def for_chart(rows):
    """[(marked_at, label)] of the marks within the window of a chart's rows ((start, ...) per
    bar, oldest first, evenly spaced)."""
    if not rows:
        return []
    step = rows[1][0] - rows[0][0] if len(rows) > 1 else None
    end = rows[-1][0] + step if step else rows[-1][0]
    return [tuple(row) for row in execute(WITHIN, {"start": rows[0][0], "end": end, "limit": SHOWN}).all()]
