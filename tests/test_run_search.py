"""The runs list's error text search (web/runlist.py): it reads the runs that have an error,
through index job_runs_errored (migration 0022), however many runs succeeded."""

import random
import re

from sqlalchemy import select
from sqlalchemy.dialects import postgresql
from werkzeug.datastructures import MultiDict

from jobsweb.core.database import db
from jobsweb.core.models import JobRun
from jobsweb.web import error_search, runlist
from jobsweb.web.shown_text import MASK, shown


def test_a_search_reads_only_the_runs_that_have_an_error_newest_first(app, sql):
    # A hundred thousand runs, one in a hundred dead with an error, the others succeeded.
    sql("INSERT INTO job_runs (job_type, status, last_error) "
        "SELECT 'jobsweb.noop', CASE WHEN n % 100 = 0 THEN 'dead' ELSE 'succeeded' END, "
        "CASE WHEN n % 100 = 0 THEN 'connection refused by upstream ' || n END FROM generate_series(1, 100000) n")
    # A tenth of the runs changed since, as on a busy table: no page is all-visible.
    sql("VACUUM ANALYZE job_runs")
    sql("UPDATE job_runs SET progress_note = 'x' WHERE id % 10 = 0")
    sql("ANALYZE job_runs")
    with app.test_request_context():
        for text, expected in (("says nothing like this", []), ("upstream 9990", [99900]), ("UPSTREAM 100000", [100000])):
            run_filter = runlist.RunFilter.from_args(MultiDict({"q": text}))
            newest = error_search.matching_statement(run_filter.conditions(with_text=False), text)
            statement = str(newest.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
            plan = "\n".join(row[0] for row in sql("EXPLAIN " + statement.replace("%%", "%")))
            # Not the primary key walked newest first until 51 runs match: for a text no error
            # says, that read every run.
            assert "using job_runs_errored" in plan and "job_runs_pkey" not in plan, plan
            assert [row[0] for row in sql(statement.replace("%%", "%"))] == expected


SECRET_ERROR = "could not connect: password=Zq9xK7wP host=db"
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def listed(client, run_id, text):
    """Whether the runs list searched for `text` shows run `run_id` (a refused search shows none)."""
    response = client.get("/runs", query_string={"q": text})
    assert response.status_code in (200, 400), (text, response.status_code)
    return f'href="/runs/{run_id}"' in response.get_data(as_text=True)


def test_a_search_never_lists_a_run_for_text_only_its_masked_secret_holds(sign_in, sql):
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', %s) "
                      "RETURNING id", [SECRET_ERROR])
    client = sign_in("viewer")
    assert listed(client, run_id, "could not connect") and listed(client, run_id, "PASSWORD")
    for text in ("word=Z", "rd=z", "d=Zq", "=Zq9", "Zq9x", "q9xK7", "K7wP", "zq9xk7wp", "wP host", "Zq9xK7wP host=db"):
        assert not listed(client, run_id, text), text
    # The mask is not searched for either: where the search's masks begin and end is not the pages'.
    refused = client.get("/runs", query_string={"q": "••• host"})
    assert refused.status_code == 400 and "holds the mask" in refused.get_data(as_text=True)


def test_a_mask_word_spelt_with_a_letter_python_folds_to_ascii_hides_its_value_from_the_search_too(sign_in, sql):
    # KELVIN SIGN and the dotted capital I: Python's lower() gives k and i, so the page masks
    # this token; PostgreSQL's case-insensitive match (C collation) did not, and the search
    # listed the run for its value.
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', %s) "
                      "RETURNING id", ["could not connect: to\u212aen=Zq9xK7wP host=db"])
    client = sign_in("viewer")
    assert listed(client, run_id, "could not connect")
    for text in ("Zq9x", "K7wP", "en=Zq"):
        assert not listed(client, run_id, text), text


def test_the_character_by_character_extraction_of_a_masked_password_recovers_nothing(sign_in, sql):
    """The review's attack (issue 38: 307 requests read `rd=zq9xk7wp`): after a known prefix,
    guess the next character and keep the one whose search lists the run."""
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', %s) "
                      "RETURNING id", [SECRET_ERROR])
    sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', 'timeout')")
    client = sign_in("viewer")
    requests, recovered = 0, {}
    for prefix in ("password=", "word=", "rd=", "d=", "="):
        known = ""
        while len(known) < 12:
            for guess in ALPHABET:
                requests += 1
                if listed(client, run_id, prefix + known + guess):
                    known += guess
                    break
            else:
                break
        recovered[prefix] = known
    # The search reads the error as the page shows it ("password=•••••• host=db", one masking
    # rule, core/masking.py): after "=", only the "db" that the page shows is found.
    assert recovered == {"password=": "", "word=": "", "rd=": "", "d=": "", "=": "db"}
    assert requests == 5 * len(ALPHABET) + ALPHABET.index("d") + 1 + ALPHABET.index("b") + 1


# Pieces of errors that masking reads: mask words in any case, separators, quotes, line breaks,
# URLs, escape sequences and controls, non-ASCII letters and spaces.
PIECES = ["password", "PassWord", "token", "api_key", "secret", "=", ":", ": ", '"', "'", "\n", " ", "\t", "@",
          "/", "://", "http", "u", "x", "Z9", "KeyError", "\x1b[31m", "\x1b", "]", "\x07", "\r", "\r\n", ",",
          "{", "}", "&", ";", "\u202e", "\x9b", "\x9d", "é", "\u3000", "-", ".", "_", "\\"]


def test_the_searchs_mask_hides_at_least_what_the_pages_mask(app, sql):
    """Each stretch of an error the search may match (between its masks) is on the page as it
    is: no search text can match what a page hides. 4,000 errors of random pieces, seeded."""
    pick = random.Random(38)
    errors = [SECRET_ERROR, '{"password"\n:\n"Zq9"}', "DB_URL=postgres://app:Zq9@db/prod", "Authorization: Bearer Zq9",
              "a\x1b]0;pass\x07word=Zq9", "http://u:pass\x1bword=1@h"]
    errors += ["".join(pick.choice(PIECES) for _ in range(pick.randint(1, 16))) for _ in range(4000)]
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', e FROM unnest(CAST(%s AS text[])) e",
        [errors])
    with app.app_context():
        words = app.config["JOBSWEB_MASK_KEYS"]
        searched = db.session.execute(select(JobRun.last_error, error_search.searchable_error()).order_by(JobRun.id)).all()
    assert len(searched) == len(errors)
    leaks = [(error, stretch) for error, searchable in searched
             for stretch in re.split(f"[{MASK[0]}]+", searchable) if stretch not in shown(error, words)]
    assert leaks == []
    # Not all hidden either: the words before a secret stay searchable.
    assert searched[0][1].startswith("could not connect: password")



def test_a_search_past_its_limit_is_stopped_by_the_server_with_a_page_saying_so(sign_in, sql, monkeypatch):
    from jobsweb.web import search_limits

    # 2 ms: no search of 50,000 errors ends within it, and the test need not wait 3 s.
    monkeypatch.setattr(search_limits, "LIMIT_SEARCH", "SET LOCAL statement_timeout = 2")
    sql("INSERT INTO job_runs (job_type, status, last_error) "
        "SELECT 'jobsweb.noop', 'dead', 'connection refused by upstream ' || n FROM generate_series(1, 50000) n")
    client = sign_in("viewer")
    response = client.get("/runs", query_string={"q": "says nothing like this"})
    html = response.get_data(as_text=True)
    assert response.status_code == 503 and response.headers["Retry-After"] == "3"
    assert "Search took too long" in html and "the database stopped it" in html and "Traceback" not in html
    # Stopped on the server: no backend is still reading for it.
    assert sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%regexp_replace%%' "
               "AND state = 'active' AND pid <> pg_backend_pid()") == [(0,)]
    # Within the real limit, the same search answers (and the person's lock went with the transaction).
    monkeypatch.undo()
    assert client.get("/runs", query_string={"q": "says nothing like this"}).status_code == 200


def test_each_person_runs_one_search_at_a_time_and_the_site_a_few(sign_in, sql):
    from jobsweb.web import search_limits

    sql("INSERT INTO job_runs (job_type, status, last_error) VALUES ('jobsweb.noop', 'dead', 'timeout')")
    viewer = sign_in("viewer")
    # The viewer's other search, still running: its lock, held by another connection.
    sql("SELECT pg_advisory_lock(%s, hashtext('viewer@example.com'))", [search_limits.PERSON_LOCKS])
    busy = viewer.get("/runs", query_string={"q": "timeout"})
    assert busy.status_code == 429 and "Search busy" in busy.get_data(as_text=True)
    assert busy.headers["Retry-After"] == "3"
    assert viewer.get("/runs").status_code == 200  # the list without a search is not limited
    other = sign_in("operator")
    assert other.get("/runs", query_string={"q": "timeout"}).status_code == 200
    # Every slot of the site taken by others' searches: nobody's search runs.
    sql("SELECT pg_advisory_unlock_all()")
    sql("SELECT pg_advisory_lock(%s, slot) FROM generate_series(1, %s) slot",
        [search_limits.SLOT_LOCKS, search_limits.SEARCH_SLOTS])
    assert other.get("/runs", query_string={"q": "timeout"}).status_code == 429
    sql("SELECT pg_advisory_unlock(%s, 1)", [search_limits.SLOT_LOCKS])
    listed = other.get("/runs", query_string={"q": "timeout"})
    assert listed.status_code == 200 and 'href="/runs/1"' in listed.get_data(as_text=True)
    sql("SELECT pg_advisory_unlock_all()")
