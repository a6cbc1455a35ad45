"""The audit page: every audit entry, newest first, filtered by user, action and object."""

from flask import Blueprint, request
from sqlalchemy import select

from . import audit
from ..core.database import db
from ..core.errors import EMAIL_MAX_CHARS
from ..core.models import JobDefinition, User
from .access import role_required
from .rendering import render
from .runlist import number, text_filter

bp = Blueprint("audit", __name__)

TEXT_MAX_CHARS = EMAIL_MAX_CHARS  # an email, the longest of the text filters
USERS_LISTED = 500  # emails suggested in the user filter


@bp.get("/audit")
@role_required("admin")
def index():
    """Who did what, newest first, keyset-paged; the table alone for htmx (filters, pages)."""
    args = request.args
    filters = {"user": text_filter(args, "user", max_chars=TEXT_MAX_CHARS),
               "action": text_filter(args, "action", max_chars=TEXT_MAX_CHARS),
               "object": text_filter(args, "object", max_chars=TEXT_MAX_CHARS), "object_id": number(args, "object_id")}
    before = number(request.args, "before")
    entries, next_before = audit.page(filters["user"], filters["action"], filters["object"],
                                      filters["object_id"], before)
    query = {name: value for name, value in filters.items() if value not in ("", None)}
    # Definitions by name ("definition nightly report", not "definition #9"); a deleted one keeps
    # the name its delete entry recorded.
    ids = {e.target_id for e in entries if e.target_type == "definition" and e.target_id}
    definition_names = dict(db.session.execute(select(JobDefinition.id, JobDefinition.name)
                                               .where(JobDefinition.id.in_(ids))).all()) if ids else {}
    users = db.session.scalars(select(User.email).order_by(User.email).limit(USERS_LISTED)).all()
    return render("audit.html", "partials/_audit_table.html", entries=entries, before=before,
                  next_before=next_before, definition_names=definition_names, filters=filters, query=query, users=users,
                  actions=audit.distinct("action"), objects=audit.distinct("target_type"))
