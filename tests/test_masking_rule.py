"""One masking rule (core/masking.py): the pages mask in Python, the error search in SQL, with
the same table of steps, and both give the same text for any text (issue 53: the page's URL mask
and the search's had drifted apart, and the search listed a run for a value the page masked)."""

from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy import select

from jobsweb.core import masking
from jobsweb.core.database import db
from jobsweb.core.masking import MASK, is_secret, masked, shown
from jobsweb.core.models import JobRun
from jobsweb.web import error_search

WORDS = ["password", "token", "api_key", "access_key", "secret", "auth", "private_key"]
# Pieces that make the shapes the rule reads, and those that once set the two engines apart:
# quotes, escapes, URL parts with and without a scheme, keys in other scripts or cases, mask
# words hyphenated or with letters Python folds (KELVIN SIGN, dotted I), Unicode spaces, escape
# sequences in both forms, bidi overrides, braces and brackets.
PIECES = ["password", "PassWord", "api-key", "Api_Key", "X-Api-Key", "to\u212aen", "SECRET", "auth", "tökén",
          "priváte-key", "user", "pw", "2", "9", "ä", "ж", "é", "_", "-", ".", "=", ":", ": ", "://", "@", "/",
          "?", "&", ";", ",", '"', "'", "\\", "\\\"", "{", "}", "[", "]", "(", ")", " ", "  ", "\t", "\n", "\r",
          "\r\n", "\\n", "\\t", "\\u043f", "\xa0", "\u2003",
          "\x1b", "\x1b[", "\x1b[31m", "\x1b]0;", "\x07", "\x1b\\", "\x9b", "\x9d",
          "\x9c", "\x85", "\u202e", "\u2066", "\u0130", "\x7f", "s3cr3t", "Zq9xK7wP", "http", "postgres", "db",
          "host", "value", "#", "%", "+", "$", "\U0001f511", MASK[0]]
noise = st.lists(st.sampled_from(PIECES), max_size=6).map("".join)
# The shapes a value is masked in, with noise inside each part: quoted keys and values, key=value,
# `Key: value` lines and URLs, so that most examples hold a pair the rule reads, near the edges
# where Python's first alternative and PostgreSQL's longest match could part.
KEYS = ["password", "X-Api-Key", "to\u212aen", "SECRET", "auth_x", "пароль_token", "://svc:api_token@"]
quote = st.sampled_from(['"', "'", ""])
key = st.tuples(noise, st.sampled_from(KEYS), noise).map("".join)
pair = st.one_of(
    st.tuples(quote, key, quote, st.sampled_from([":", " : ", ":\n", "="]), quote, noise, quote, noise),
    st.tuples(st.sampled_from(["\n", ""]), key, st.sampled_from([": ", ":\t", "="]), noise),
    st.tuples(st.sampled_from(["http", "", "x"]), st.just("://"), noise, st.just(":"), noise, st.just("@"), noise),
).map("".join)
texts = st.one_of(st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
                  st.lists(st.one_of(pair, noise), max_size=5).map("".join))


def masked_in_sql(run_id):
    """The run's error as the error search reads it: masked in the statement by search_masks."""
    return db.session.scalar(select(error_search.searchable_error()).where(JobRun.id == run_id))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts)
def test_the_error_search_masks_in_sql_exactly_as_the_pages_mask_in_python(app, sql, text):
    app.config["JOBSWEB_MASK_KEYS"] = WORDS
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', %s) "
                      "RETURNING id", [text])
    with app.test_request_context():
        assert masked_in_sql(run_id) == shown(text, WORDS)


def test_the_shapes_the_review_found_are_masked_alike_on_the_page_and_in_the_search(app, sql):
    app.config["JOBSWEB_MASK_KEYS"] = WORDS
    for text, page in (
            # M2's JSON key shaped like a URL: its value masked, on the page and in the search.
            ('{"://svc:api_token@": "s3cr3tvalue9"}', '{"://svc:••••••@": ••••••}'),
            # A URL password holding `=`: masked whole as a password, not from its `=` on.
            ("via http://user:secret=abc@host", "via http://user:••••••@host"),
            # L4: hyphenated mask words and headers.
            ("X-Api-Key: k3y\nnext line", "X-Api-Key: ••••••\nnext line"),
            ("{'private-key': 'pk', 'access-key': 'ak'}", "{'private-key': ••••••, 'access-key': ••••••}"),
            ("tokenä=v4lue and пароль_password=Zq9xK7wP", "tokenä=•••••• and пароль_password=••••••")):
        [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', %s) "
                          "RETURNING id", [text])
        with app.test_request_context():
            assert shown(text, WORDS) == page
            assert masked_in_sql(run_id) == page


def test_mask_words_compare_with_hyphens_read_as_underscores_in_any_case():
    words = ["api_key", "private-key"]
    for key in ("api_key", "X-Api-Key", "API-KEY", "my_private_key", "Private-Key-2"):
        assert is_secret(key, words), key
        assert masked(f"{key}=v", words) == f"{key}={MASK}", key
    for key in ("apikey", "api key", "private", "keys"):
        assert not is_secret(key, words), key


def test_no_mask_words_leave_url_passwords_masked():
    assert masking.shown("password=x https://u:p4ss@h", []) == "password=x https://u:••••••@h"
