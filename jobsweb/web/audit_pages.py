"""The audit page: every audit entry, newest first, filtered by user, action and object."""

from flask import Blueprint, request
from sqlalchemy import select

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput, clean_text
from ..core.models import User
from .access import role_required
from .rendering import render
from .runlist import BadFilter, number

bp = Blueprint("audit", __name__)

TEXT_MAX_CHARS = 254  # an email, the longest of the text filters
USERS_LISTED = 500  # emails suggested in the user filter


def _text(name):
    value = request.args.get(name, "").strip()
    if len(value) > TEXT_MAX_CHARS:
        raise BadFilter(f"{name} is longer than {TEXT_MAX_CHARS} characters")
    try:
        return clean_text(name, value)
    except InvalidInput as exc:
        raise BadFilter(str(exc)) from None


@bp.get("/audit")
@role_required("admin")
def index():
    """Who did what, newest first, keyset-paged; the table alone for htmx (filters, pages)."""
    filters = {"user": _text("user"), "action": _text("action"), "object": _text("object"),
               "object_id": number(request.args, "object_id")}
    before = number(request.args, "before")
    entries, next_before = audit.page(filters["user"], filters["action"], filters["object"],
                                      filters["object_id"], before)
    query = {name: value for name, value in filters.items() if value not in ("", None)}
    users = db.session.scalars(select(User.email).order_by(User.email).limit(USERS_LISTED)).all()
    return render("audit.html", "partials/_audit_table.html", entries=entries, before=before,
                  next_before=next_before, filters=filters, query=query, users=users,
                  actions=audit.distinct("action"), objects=audit.distinct("target_type"))
