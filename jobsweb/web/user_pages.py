"""Admins manage who may sign in, and with which role."""

from flask import Blueprint, abort, flash, redirect, request, url_for
from sqlalchemy import select

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput, clean_text
from ..core.models import ROLES, User
from .access import access, role_required, viewer
from .accounts import create_user, reset_password, set_active
from .forms import UserForm
from .rendering import redirect_to, render

bp = Blueprint("users", __name__, url_prefix="/users")


@bp.before_request
def only_jobswebs_own_users():
    """Inside a host app with `authorize`, the host decides who signs in: no users to manage here."""
    if access().authorize is not None:
        abort(404)


@bp.route("", methods=["GET", "POST"])
@role_required("admin")
def index():
    """Every user, and a form to add one (errors come back in place)."""
    form = UserForm()
    if form.validate_on_submit():
        try:
            user = create_user(form.email.data, form.password.data, form.role.data)
        except InvalidInput as exc:
            getattr(form, exc.field).errors.append(exc.message)
        else:
            audit.record("create_user", "user", user.id, email=user.email, role=user.role)
            db.session.commit()
            flash(f"{user.email} can now sign in as {user.role}.")
            return redirect_to(url_for("jobsweb.users.index"))
    return _page(form, 422 if form.errors else 200)


def _page(form, status, **context):
    users = db.session.scalars(select(User).order_by(User.email)).all()
    response = render("users.html", "partials/_user_form.html", users=users, form=form, roles=ROLES, **context)
    response.status_code = status
    return response


@bp.post("/<int:user_id>/role")
@role_required("admin")
def change_role(user_id):
    """Give a user another role; admins cannot demote themselves (someone must stay admin)."""
    user = db.get_or_404(User, user_id, description=f"There is no user {user_id}.")
    role = request.form.get("role")
    if role not in ROLES:
        abort(400, f"Bad role: choose one of {', '.join(ROLES)}.")
    if user.id == viewer().user_id and role != "admin":
        # Said beside the role field on the users page, not on an error page of its own.
        return _page(UserForm(formdata=None), 400, role_error=(
            user.id, "role: you cannot take the admin role from yourself; ask another admin."))
    audit.record("change_role", "user", user.id, email=user.email, old=user.role, new=role)
    user.role = role
    db.session.commit()
    flash(f"{user.email} is now {role}.")
    return redirect(url_for("jobsweb.users.index"))


def _user_or_404(user_id):
    return db.get_or_404(User, user_id, description=f"There is no user {user_id}.")


@bp.post("/<int:user_id>/deactivate")
@role_required("admin")
def deactivate(user_id):
    """Stop a user from signing in and end their sessions; not yourself (someone must stay admin)."""
    user = _user_or_404(user_id)
    if user.id == viewer().user_id:
        abort(400, "You cannot deactivate yourself; ask another admin.")
    set_active(user, False)
    audit.record("deactivate_user", "user", user.id, email=user.email)
    db.session.commit()
    flash(f"{user.email} can no longer sign in; their sessions have ended.")
    return redirect(url_for("jobsweb.users.index"))


@bp.post("/<int:user_id>/reactivate")
@role_required("admin")
def reactivate(user_id):
    """Let a deactivated user sign in again."""
    user = _user_or_404(user_id)
    set_active(user, True)
    audit.record("reactivate_user", "user", user.id, email=user.email)
    db.session.commit()
    flash(f"{user.email} can sign in again.")
    return redirect(url_for("jobsweb.users.index"))


@bp.post("/<int:user_id>/password")
@role_required("admin")
def set_password(user_id):
    """Reset a user's password (tell it to them another way); their sessions end."""
    user = _user_or_404(user_id)
    try:
        password = clean_text("password", request.form.get("password", ""))
        reset_password(user, password)
    except InvalidInput as exc:
        abort(400, f"Bad password: {exc.message}.")
    audit.record("reset_password", "user", user.id, email=user.email)
    db.session.commit()
    flash(f"{user.email} has a new password; their sessions have ended.")
    return redirect(url_for("jobsweb.users.index"))
