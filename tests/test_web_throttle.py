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


def signed_in_before(app, email, address=OWNER):
    """A browser its owner has signed in with (and out of) before: it holds a device cookie."""
    browser = app.test_client()
    assert attempt(browser, email, PASSWORD, address).status_code == 302
    assert browser.get_cookie("jobsweb_device", path="/sign-in") is not None
    browser.post("/sign-out", data={"csrf_token": csrf_token(browser, "/")})
    return browser


def test_the_owners_browser_signs_in_at_once_and_a_fresh_one_seconds_later_while_the_guessers_address_is_limited(
        app, make_user, sql):
    victim, other = make_user("admin", "victim@example.com"), make_user("viewer")
    owner = signed_in_before(app, victim)
    guesser, colleague = app.test_client(), app.test_client()
    for _ in range(FAILURES_ALLOWED):
        assert attempt(guesser, victim, WRONG, GUESSER).status_code == 401
    refused = attempt(guesser, victim, PASSWORD, GUESSER)
    assert refused.status_code == 429 and 600 < int(refused.headers["Retry-After"]) <= 900
    assert attempt(owner, victim, PASSWORD, OWNER).status_code == 302
    assert attempt(colleague, other, PASSWORD, "192.0.2.44").status_code == 302
    # A browser that never signed in to the account waits out its slow-down: seconds, not minutes.
    fresh = app.test_client()
    slowed = attempt(fresh, victim, PASSWORD, "192.0.2.45")
    # 2 s after the latest failure, less what the requests since took (under a second).
    assert slowed.status_code == 429 and slowed.headers["Retry-After"] in ("1", "2")
    assert "Too many wrong passwords for this account: try again in " in slowed.get_data(as_text=True)
    sql("UPDATE jobsweb_sign_in_failures SET at = at - interval '2 seconds'")
    assert attempt(fresh, victim, PASSWORD, "192.0.2.45").status_code == 302


def test_guessing_spread_over_many_addresses_is_slowed_for_the_account_as_a_whole(app, make_user, sql):
    victim = make_user("admin", "victim@example.com")
    guesser = app.test_client()
    for n in range(FAILURES_ALLOWED):
        assert attempt(guesser, victim, WRONG, f"203.0.113.{n}").status_code == 401
    # Each of those addresses failed for the account, now at its limit: none may try it again...
    assert attempt(guesser, victim, PASSWORD, "203.0.113.3").status_code == 429
    # ...and a new one waits for the account's slow-down, doubling with each failure, at most a minute.
    slow_downs = [2, 4, 8, 16, 32, 60, 60, 60]
    for n, seconds in enumerate(slow_downs):
        refused = attempt(guesser, victim, WRONG, f"203.0.113.{100 + n}")
        # Retry-After: the slow-down after the latest failure, less what the requests since took.
        assert refused.status_code == 429 and seconds - 1 <= int(refused.headers["Retry-After"]) <= seconds
        sql("UPDATE jobsweb_sign_in_failures SET at = at - make_interval(secs => %s)", [seconds])
        assert attempt(guesser, victim, WRONG, f"203.0.113.{100 + n}").status_code == 401
    # The owner's own browser is not slowed.
    sql("DELETE FROM jobsweb_sign_in_failures")
    owner = signed_in_before(app, victim)
    for n in range(FAILURES_ALLOWED):
        attempt(guesser, victim, WRONG, f"203.0.113.{n}")
    assert attempt(owner, victim, PASSWORD, OWNER).status_code == 302


@pytest.fixture
def proxied(database_url_for_tests, app):
    """The standalone app behind one proxy it trusts (JOBSWEB_PROXY_HOPS=1), reached directly:
    each request says what X-Forwarded-For it likes."""
    from jobsweb import create_app
    from tests.conftest import SECRET_KEY

    return create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "TESTING": True, "SECRET_KEY": SECRET_KEY,
                       "JOBSWEB_PROXY_HOPS": 1})


def forged(client, email, password, address):
    """A sign-in whose X-Forwarded-For names `address`, sent straight to the app."""
    return client.post("/sign-in", headers={"X-Forwarded-For": address},
                       data={"email": email, "password": password, "csrf_token": csrf_token(client)})


def test_a_new_forged_x_forwarded_for_per_request_gets_no_more_guesses(proxied, make_user, sql):
    victim = make_user("admin", "victim@example.com")
    guesser = proxied.test_client()
    statuses = [forged(guesser, victim, WRONG, f"198.18.0.{n}").status_code for n in range(FAILURES_ALLOWED)]
    # The next 30 as if sent within the account's 2 s slow-down, however slowly this machine sends
    # them: its latest failure is dated a minute ahead.
    sql("UPDATE jobsweb_sign_in_failures SET at = now() + interval '1 minute' WHERE id = (SELECT max(id) "
        "FROM jobsweb_sign_in_failures)")
    statuses += [forged(guesser, victim, WRONG, f"198.18.1.{n}").status_code for n in range(30)]
    assert statuses == [401] * FAILURES_ALLOWED + [429] * 30
    assert sql("SELECT count(*) FROM jobsweb_sign_in_failures") == [(FAILURES_ALLOWED,)]


def test_ten_failures_forged_from_a_chosen_address_do_not_keep_its_users_out(proxied, make_user):
    target = "192.0.2.80"  # the address of an office the attacker knows
    colleague = make_user("viewer", "colleague@example.com")
    browser = proxied.test_client()
    assert forged(browser, colleague, PASSWORD, target).status_code == 302
    browser.post("/sign-out", data={"csrf_token": csrf_token(browser, "/")})
    attacker = proxied.test_client()
    for n in range(FAILURES_ALLOWED):
        assert forged(attacker, f"guess{n}@example.com", WRONG, target).status_code == 401
    assert forged(attacker, colleague, PASSWORD, target).status_code == 429  # no device: the address's limit
    assert forged(browser, colleague, PASSWORD, target).status_code == 302


def test_a_device_has_its_own_ten_failures_and_a_forged_or_anothers_cookie_proves_nothing(app, make_user, sql):
    victim, other = make_user("admin", "victim@example.com"), make_user("viewer", "other@example.com")
    owner = signed_in_before(app, victim)
    for _ in range(FAILURES_ALLOWED):
        assert attempt(owner, victim, WRONG, OWNER).status_code == 401
    assert attempt(owner, victim, PASSWORD, OWNER).status_code == 429  # the device's own limit
    assert sql("SELECT DISTINCT address LIKE 'device %%' FROM jobsweb_sign_in_failures") == [(True,)]
    sql("DELETE FROM jobsweb_sign_in_failures")
    cookie = owner.get_cookie("jobsweb_device", path="/sign-in").value
    for value in (cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB"), cookie):
        stranger = app.test_client()
        stranger.set_cookie("jobsweb_device", value, path="/sign-in")
        for _ in range(FAILURES_ALLOWED):
            attempt(app.test_client(), other if value == cookie else victim, WRONG, GUESSER)
        # Tampered: no device; the victim's cookie for the other account: no device either.
        assert attempt(stranger, other if value == cookie else victim, PASSWORD, GUESSER).status_code == 429
        sql("DELETE FROM jobsweb_sign_in_failures")


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


def test_a_request_without_x_forwarded_for_behind_a_trusted_proxy_is_warned_of_once(proxied, caplog):
    client = proxied.test_client()
    client.get("/healthz")  # a health checker reaching the app directly: no warning
    client.get("/sign-in", headers={"X-Forwarded-For": "192.0.2.7"})
    assert "X-Forwarded-For" not in caplog.text
    client.get("/sign-in")
    client.get("/sign-in", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    warnings = [r for r in caplog.records if "without X-Forwarded-For" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in warnings] == [(
        "WARNING", "JOBSWEB_PROXY_HOPS is 1, but a request from 127.0.0.1 came without X-Forwarded-For: it did not "
        "pass through the proxy. If clients can reach the app without it, they choose the address sign-in limits "
        "count: let only the proxy reach the app, or set JOBSWEB_PROXY_HOPS=0 (warned once)")]
