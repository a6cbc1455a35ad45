"""Security: users can be deactivated and have every session ended; failed sign-ins are kept so that guessing is throttled across every web process.

Revision ID: 0012_security
Revises: 0011_code_definitions
Create Date: 2026-11-23

jobsweb_users.active: a deactivated user cannot sign in, and their sessions end at once.
jobsweb_users.session_version: copied into the session at sign-in and compared on every
request; sign-out, a password reset and deactivation add one, which ends every session of
that user (the session is a signed cookie: it cannot be deleted from the server side).
jobsweb_sign_in_failures: one row per wrong password, read for the last 15 minutes.
"""

from alembic import op

revision = "0012_security"
down_revision = "0011_code_definitions"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE jobsweb_users
    ADD COLUMN active boolean NOT NULL DEFAULT true,
    ADD COLUMN session_version integer NOT NULL DEFAULT 1;

CREATE TABLE jobsweb_sign_in_failures (
    id bigserial PRIMARY KEY,
    email text NOT NULL,  -- lower case, as typed (an account need not exist)
    address text NOT NULL,  -- the client's address
    at timestamptz NOT NULL DEFAULT now()
);
-- RECENT_FAILURES_BY_EMAIL: an account's failures in the last 15 minutes.
CREATE INDEX jobsweb_sign_in_failures_email ON jobsweb_sign_in_failures (email, at);
-- RECENT_FAILURES_BY_ADDRESS: one address's failures in the last 15 minutes.
CREATE INDEX jobsweb_sign_in_failures_address ON jobsweb_sign_in_failures (address, at);
-- FORGET_OLD_FAILURES: rows past the window are deleted.
CREATE INDEX jobsweb_sign_in_failures_at ON jobsweb_sign_in_failures (at);
"""

DOWNGRADE = """
DROP TABLE jobsweb_sign_in_failures;
ALTER TABLE jobsweb_users DROP COLUMN active, DROP COLUMN session_version;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
