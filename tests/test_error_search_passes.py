"""The error search's masking passes are skipped where they cannot change an error (issue 55, item
3): the ten regexp_replace passes cost about 450 ms over the 10,000 errors every search masks at
10,000,000 runs, most of it key=value's pass, and most errors hold no mask word, control character
or URL. That the search still masks as the pages do is tests/test_masking_rule.py's to show."""

from sqlalchemy import select
from sqlalchemy.dialects import postgresql

from jobsweb.core.masking import CONTROL_STEPS, mask_steps, words_pattern
from jobsweb.web import error_search

WORDS = ("password", "token", "api_key")


def patterns_in(statement):
    """Every text the statement sends as a parameter (patterns and replacements)."""
    return [value for value in statement.compile(dialect=postgresql.dialect()).params.values() if isinstance(value, str)]


def test_whether_an_error_is_masked_is_decided_by_its_mask_words_and_urls_not_by_the_masking_passes(app):
    app.config["JOBSWEB_MASK_KEYS"] = list(WORDS)
    with app.test_request_context():
        sent = patterns_in(select(error_search.searchable_error()))
    words = words_pattern(WORDS)
    url = [pattern for pattern, _ in mask_steps(WORDS) if words not in pattern]
    keyed = [pattern for pattern, _ in mask_steps(WORDS) if words in pattern]
    # The passes that look for a mask word run only where one is: each is sent once, for its pass.
    assert len(keyed) == 3
    for pattern in keyed:
        assert sum(pattern in text for text in sent) == 1, pattern[:40]
    # The test before them: the mask words, or a URL's password (its own pass and the test).
    assert [text for text in sent if text.startswith(f"(?:{words})")] == [f"(?:{words})|(?:{url[0]})"]
    # The control passes: their test is their own patterns, each of which is cheap.
    assert ("|".join(f"(?:{pattern})" for pattern, _ in CONTROL_STEPS)) in sent


def test_an_error_with_none_of_them_reads_as_stored_and_one_with_each_is_masked(app, sql):
    app.config["JOBSWEB_MASK_KEYS"] = list(WORDS)
    errors = ["plain failure 42", "token=Zq9xK7wP failed", "GET https://bob:hunter2@example.com failed",
              "red \x1b[31mtext\x1b[0m", "tab\tand\nline"]
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', e "
        "FROM unnest(CAST(%s AS text[])) WITH ORDINALITY AS t(e, n) ORDER BY n", [errors])
    with app.test_request_context():
        from jobsweb.core.database import db
        from jobsweb.core.models import JobRun

        shown = db.session.scalars(select(error_search.searchable_error()).order_by(JobRun.id)).all()
    assert shown == ["plain failure 42", "token=•••••• failed", "GET https://bob:••••••@example.com failed",
                     "red text", "tab\tand\nline"]
