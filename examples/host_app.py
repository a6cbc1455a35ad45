"""A team's own Flask app with jobsweb inside it: its own Flask-SQLAlchemy models (a `users`
table of its own among them), its own Flask-Login sign-in, Flask-Migrate (whose autogenerate
leaves jobsweb's tables alone), a JSON API without CSRF, and jobsweb's admin screen at
/admin/jobs, signed in through the app's own users. Its pins: requirements-oldest.txt; its own
test suites: test_host_on_postgresql.py and test_host_on_sqlite.py (inline mode). Its session
cookies and CSRF tokens are signed with SECRET_KEY, from the environment: set it first, 32+
characters (`export SECRET_KEY=$(openssl rand -hex 32)`).

    DATABASE_URL=postgresql://... flask --app examples.host_app init-db
    DATABASE_URL=postgresql://... flask --app examples.host_app jobs migrate
    ACCOUNT_EMAIL=you@example.com ACCOUNT_PASSWORD=fern-lantern-quarry-53 ACCOUNT_ROLE=admin DATABASE_URL=postgresql://... flask --app examples.host_app add-account
    DATABASE_URL=postgresql://... flask --app examples.host_app run                # the site
    DATABASE_URL=postgresql://... flask --app examples.host_app run-jobs --forever # a worker
"""

import os
from urllib.parse import urlsplit

from flask import Flask, current_app, redirect, render_template_string, request, url_for
from flask_login import LoginManager, UserMixin, current_user, login_user
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from flask_wtf import FlaskForm
from sqlalchemy.orm import Mapped, mapped_column
from werkzeug.security import check_password_hash, generate_password_hash
from wtforms import PasswordField, StringField

from jobsweb import JobsWeb, enqueue, job

db = SQLAlchemy()
login = LoginManager()
jobs = JobsWeb()
migrate = Migrate()  # the app's own migrations: `flask db migrate` leaves jobsweb's tables alone


class Account(UserMixin, db.Model):
    """The app's own users: a table called `users`, which jobsweb leaves alone."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(unique=True)
    password_hash: Mapped[str]
    # What the app lets this person do in jobsweb: viewer, operator or admin; None, nothing.
    role: Mapped[str | None]


class Customer(db.Model):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    invoices_sent: Mapped[int] = mapped_column(default=0)
    last_note: Mapped[str | None]


@job("send_invoice", max_attempts=3)
def send_invoice(ctx):
    """Runs in this app's context: its models, its db.session and its config are at hand."""
    customer = db.session.get(Customer, ctx.payload["customer_id"])
    customer.invoices_sent += 1
    customer.last_note = current_app.config["INVOICE_NOTE"]
    db.session.commit()
    return {"sent_to": customer.email}


class SignInForm(FlaskForm):
    """Flask-WTF checks its CSRF token: another site cannot sign a visitor in as someone else."""

    email = StringField("Email")
    password = PasswordField("Password")


SIGN_IN_PAGE = """<form method="post">{{ form.csrf_token }}
<label>Email {{ form.email() }}</label> <label>Password {{ form.password() }}</label> <button>Sign in</button></form>"""


def local_path(target):
    """`next` if it is a path on this site, else the home page: never a redirect to another site
    (https://evil.example, //evil.example and /\\evil.example all leave it)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else "/"


@login.user_loader
def load_account(account_id):
    return db.session.get(Account, int(account_id))


def authorize():
    """jobsweb asks the app who is signed in: None (nobody), (identity, role), or (identity,
    None) for someone signed in whom the app does not let in (a 403 page)."""
    if not current_user.is_authenticated:
        return None
    return current_user.email, current_user.role


def create_app(config=None):
    app = Flask(__name__)
    app.config.update(
        # postgresql:// as most apps have it: SQLAlchemy picks psycopg2 (examples/requirements-oldest.txt).
        SQLALCHEMY_DATABASE_URI=os.environ.get("DATABASE_URL", ""),
        SECRET_KEY=os.environ.get("SECRET_KEY"),  # unset or under 32 characters: init_app stops, naming it
        INVOICE_NOTE="Thank you for your business",
        JOBSWEB_LOGIN_URL="/login",  # where jobsweb sends a person who is not signed in
    )
    app.config.update(config or {})
    db.init_app(app)
    login.init_app(app)
    jobs.init_app(app, url_prefix="/admin/jobs", authorize=authorize)
    migrate.init_app(app, db)  # before or after jobs.init_app, either works

    @app.route("/login", methods=["GET", "POST"])
    def sign_in():
        """The app's own sign-in: a form with a CSRF token, back only to a page of this site."""
        form = SignInForm()
        if form.validate_on_submit():
            account = db.session.scalar(db.select(Account).where(Account.email == form.email.data))
            if account and check_password_hash(account.password_hash, form.password.data):
                login_user(account)
                return redirect(local_path(request.args.get("next")))
        status = 400 if request.method == "POST" else 200
        return render_template_string(SIGN_IN_PAGE, form=form), status

    @app.post("/api/customers/<int:customer_id>/invoice")
    def invoice(customer_id):
        """A JSON API without CSRF tokens: jobsweb's CSRF checks do not reach it."""
        run_id = enqueue("send_invoice", {"customer_id": customer_id}, session=db.session)
        db.session.commit()
        return {"run_id": run_id}, 202

    @app.errorhandler(404)
    def not_found(exc):
        return "The host's own 404 page", 404

    @app.cli.command("init-db")
    def init_db():
        """Create the app's own tables (a real app would use its own migrations)."""
        db.create_all()

    @app.cli.command("add-account")
    def add_account():
        """Add an account: ACCOUNT_EMAIL, ACCOUNT_PASSWORD and ACCOUNT_ROLE from the environment."""
        db.session.add(Account(email=os.environ["ACCOUNT_EMAIL"], role=os.environ["ACCOUNT_ROLE"] or None,
                               password_hash=generate_password_hash(os.environ["ACCOUNT_PASSWORD"])))
        db.session.commit()

    app.add_url_rule("/", "home", lambda: f'<a href="{url_for("jobsweb.dashboard.index")}">Jobs</a>')
    return app
