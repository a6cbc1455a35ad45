"""Sign-in limits (web/throttle.py): guessing from one address, or spread over many, is slowed,
and nobody can lock a person out of their account from elsewhere (issue 29, items 1 and 11)."""

import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

import pytest

from jobsweb.web.throttle import FAILURES_ALLOWED
from tests.conftest import PASSWORD, csrf_token

WRONG = "wrong password!"
GUESSER = "203.0.113.7"
OWNER = "198.51.100.2"


def attempt(client, email, password=PASSWORD, address="127.0.0.1"):
    """A sign-in from `address` (the test client's own session and CSRF token)."""
    return client.post("/sign-in", environ_base={"REMOTE_ADDR": address},
                       data={"email": email, "password": password, "csrf_token": csrf_token(client)})


def test_ten_wrong_passwords_for_an_account_throttle_it_with_retry_after(client, make_user):
    email = make_user("viewer")
    for _ in range(FAILURES_ALLOWED):
        assert attempt(client, email, WRONG).status_code == 401
    refused = attempt(client, email)  # even the right password waits, from the address that failed
    assert refused.status_code == 429
    assert 0 < int(refused.headers["Retry-After"]) <= 15 * 60


def test_ten_wrong_passwords_from_one_address_throttle_it_across_accounts(client, make_user):
    email = make_user("viewer")
    for n in range(FAILURES_ALLOWED):
        attempt(client, f"guess{n}@example.com", WRONG)
    assert attempt(client, email).status_code == 429


def test_a_right_password_from_a_fresh_address_signs_in_while_the_guessers_address_is_limited(app, make_user):
    victim, other = make_user("admin", "victim@example.com"), make_user("viewer")
    guesser, owner, colleague = app.test_client(), app.test_client(), app.test_client()
    for _ in range(FAILURES_ALLOWED):
        assert attempt(guesser, victim, WRONG, GUESSER).status_code == 401
    refused = attempt(guesser, victim, PASSWORD, GUESSER)
    assert refused.status_code == 429 and 600 < int(refused.headers["Retry-After"]) <= 900
    assert attempt(owner, victim, PASSWORD, OWNER).status_code == 302
    assert attempt(colleague, other, PASSWORD, "192.0.2.44").status_code == 302


def test_guessing_spread_over_many_addresses_gets_one_guess_per_address_past_the_limit(app, make_user):
    victim = make_user("admin", "victim@example.com")
    guesser = app.test_client()
    for n in range(FAILURES_ALLOWED):
        assert attempt(guesser, victim, WRONG, f"203.0.113.{n}").status_code == 401
    # Each of those addresses failed for the account, now at its limit: none may try it again...
    assert attempt(guesser, victim, PASSWORD, "203.0.113.3").status_code == 429
    # ...a new one gets one guess...
    assert attempt(guesser, victim, WRONG, "203.0.113.100").status_code == 401
    assert attempt(guesser, victim, WRONG, "203.0.113.100").status_code == 429
    # ...and the owner, from an address that has not been failing, signs in.
    assert attempt(app.test_client(), victim, PASSWORD, OWNER).status_code == 302


def test_a_right_password_forgets_the_typos_made_for_the_account_from_that_address(client, make_user):
    email = make_user("viewer")
    for _ in range(2):
        for _ in range(FAILURES_ALLOWED - 1):
            assert attempt(client, email, WRONG).status_code == 401
        assert attempt(client, email).status_code == 302
        client.post("/sign-out", data={"csrf_token": csrf_token(client, "/")})


def test_throttling_holds_across_processes_and_cools_down(app, client, make_user, sql):
    email = make_user("viewer")
    # Failures another web process recorded count here too; 16 minutes later they count no more.
    sql("INSERT INTO jobsweb_sign_in_failures (email, address, at) SELECT %s, '127.0.0.1', now() "
        "FROM generate_series(1, 10)", [email])
    assert attempt(client, email).status_code == 429
    sql("UPDATE jobsweb_sign_in_failures SET at = now() - interval '16 minutes'")
    assert attempt(client, email).status_code == 302


def test_failures_past_the_window_are_deleted_by_the_next_attempt(client, sql):
    sql("INSERT INTO jobsweb_sign_in_failures (email, address, at) SELECT 'x@example.com', '10.0.0.' || n, "
        "now() - interval '16 minutes' FROM generate_series(1, 3) n")
    attempt(client, "someone@example.com", WRONG)
    assert sql("SELECT email FROM jobsweb_sign_in_failures") == [("someone@example.com",)]


def test_sign_ins_wrong_passwords_and_limits_reached_are_audited(app, make_user, sql):
    victim = make_user("viewer", "victim@example.com")
    [(victim_id,)] = sql("SELECT id FROM jobsweb_users")
    guesser = app.test_client()
    attempt(guesser, "nobody@example.com", WRONG, GUESSER)
    for _ in range(FAILURES_ALLOWED - 1):
        attempt(guesser, victim, WRONG, GUESSER)
    attempt(guesser, victim, WRONG, GUESSER)  # refused: nothing to audit, nothing checked
    attempt(app.test_client(), "Victim@Example.com", PASSWORD, OWNER)
    entries = sql("SELECT user_id, user_email, action, target_type, target_id, detail FROM jobsweb_audit_log "
                  "ORDER BY id")
    assert entries[0] == (None, "nobody@example.com", "sign_in_failed", "user", None, {"address": GUESSER})
    assert entries[1:10] == [(None, victim, "sign_in_failed", "user", victim_id, {"address": GUESSER})] * 9
    assert entries[10:] == [
        (None, victim, "sign_in_limited", "user", victim_id, {"address": GUESSER, "limit": "address", "minutes": 15}),
        (victim_id, victim, "sign_in", "user", victim_id, {"address": OWNER})]


def test_the_audit_page_lists_sign_ins_for_admins(app, sign_in, sql):
    attempt(app.test_client(), "nobody@example.com", WRONG, GUESSER)
    admin = sign_in("admin")
    html = admin.get("/audit").get_data(as_text=True)
    assert "<td>sign in failed</td>" in html and "nobody@example.com" in html and f"address: {GUESSER}" in html
    assert "<td>sign in</td>" in html


def test_users_unlock_forgets_an_accounts_or_an_addresss_wrong_passwords(app, runner, make_user, sql):
    victim = make_user("viewer", "victim@example.com")
    guesser = app.test_client()
    for n in range(FAILURES_ALLOWED):
        attempt(guesser, victim if n % 2 else f"guess{n}@example.com", WRONG, GUESSER)
    assert attempt(guesser, victim, PASSWORD, GUESSER).status_code == 429

    result = runner.invoke(args=["users", "unlock", "VICTIM@example.com"])
    assert result.exit_code == 0 and "forgot 5 wrong passwords of VICTIM@example.com" in result.output
    assert attempt(guesser, victim, PASSWORD, GUESSER).status_code == 302  # 5 left from the address
    result = runner.invoke(args=["users", "unlock", "--address", GUESSER])
    assert result.exit_code == 0 and "forgot 5 wrong passwords of address 203.0.113.7" in result.output
    assert sql("SELECT count(*) FROM jobsweb_sign_in_failures") == [(0,)]

    nothing = runner.invoke(args=["users", "unlock"])
    assert nothing.exit_code == 2 and "give an EMAIL, an --address, or both" in nothing.output
    nul = runner.invoke(args=["users", "unlock", "--address", "1.2.3.4\n"])
    assert nul.exit_code == 2 and "address: must not contain" in nul.output


def _session(base):
    """A browser of its own: a cookie jar, and the CSRF token of its session."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    html = opener.open(f"{base}/sign-in", timeout=30).read().decode()
    return opener, re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)


def _post(opener, url, data):
    try:
        return opener.open(url, urllib.parse.urlencode(data).encode(), timeout=120).status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("same_account", [True, False], ids=["one account", "many accounts"])
def test_concurrent_wrong_passwords_never_check_more_passwords_than_the_limit(
        app, serve, make_user, sql, same_account):
    make_user("viewer", "victim@example.com")
    base = serve(app)
    senders = 40
    sessions = [_session(base) for _ in range(senders)]
    # Every request is sent at the same moment: the barrier releases them together, each on its
    # own connection, so they race for the count as 40 requests of a scripted guesser would.
    barrier, statuses = threading.Barrier(senders), [None] * senders

    def send(n):
        opener, token = sessions[n]
        email = "victim@example.com" if same_account else f"guess{n}@example.com"
        barrier.wait()
        statuses[n] = _post(opener, f"{base}/sign-in", {"email": email, "password": WRONG, "csrf_token": token})

    threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 401: a password was checked; 429: refused before its check.
    assert sorted(set(statuses)) == [401, 429], statuses
    assert statuses.count(401) == FAILURES_ALLOWED
    assert sql("SELECT count(*) FROM jobsweb_sign_in_failures") == [(FAILURES_ALLOWED,)]
