"""Generated secrets in errors and payloads of many shapes (issue 53, item 1): for each, no
substring of a masked value lists the run in the error search, and no page, incident,
notification, log line, Sentry event or OpenTelemetry span shows it. Hypothesis, a real database,
the real pages as a viewer, real SDKs."""

import json
import logging

import jobsweb
import pytest
import sentry_sdk
from hypothesis import HealthCheck, given, settings, strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobsweb import enqueue
from jobsweb.core.masking import shown
from jobsweb.integrations import otel, sentry
from jobsweb.ops import alerts, notify
from jobsweb.testing import drain
from tests.test_integrations import Kept

# A secret's characters: no noise word, key, date, id or hex trace id holds three of them in a
# row, so a stretch of the secret that a text shows came from the secret. Pages also hold random
# tokens (CSRF): their checks read stretches of 6.
SECRET_CHARS = "QZJqzjVXvxäЖ"
secrets = st.text(SECRET_CHARS, min_size=8, max_size=14)
# Mask words as people write them: any case, hyphenated, with digits, non-ASCII or a prefix
# glued on, and keys shaped like URLs.
WORDS = ["password", "passwd", "token", "secret", "api_key", "apikey", "access_key", "private_key", "auth",
         "credential", "session", "cookie", "dsn", "bearer", "pwd"]
key_words = st.sampled_from(WORDS).flatmap(lambda word: st.tuples(
    st.sampled_from(["", "x-", "X_", "db.", "my", "2", "пароль_", "é", "Upstream-"]),
    st.sampled_from([word, word.upper(), word.title(), word.replace("_", "-"), word.replace("_", "-").title()]),
    st.sampled_from(["", "2", "_id", "-Header", "ä", ".value"]))).map("".join)
url_keys = st.tuples(st.sampled_from(["://svc:", "http://u:", "://"]), key_words, st.just("@")).map("".join)
NOISE = ["could not connect", "host=db", "timeout after 30 s", "see ", "upstream said", "(", ")", ", ", "\n",
         "  ", "RuntimeError: ", "at line 4"]
noise = st.lists(st.sampled_from(NOISE), max_size=4).map("".join)


@st.composite
def placed(draw, secret):
    """`secret` in one of the shapes masking reads, with noise around it."""
    key = draw(st.one_of(key_words, url_keys))
    shape = draw(st.sampled_from(["eq", "quoted_eq", "header", "json", "repr", "nested", "list", "url"]))
    if shape == "url" or key.startswith(("://", "http")):
        if shape == "url":
            scheme = draw(st.sampled_from(["postgres", "https", "git+ssh", "x", "", "see:postgres"]))
            text = f"{scheme}://{draw(st.sampled_from(['app', 'u.s-er', '', 'a:b']))}:{secret}@db.internal/prod"
        else:
            text = json.dumps({key: secret, "rows": 3})
    elif shape == "eq":
        text = f"{key}={secret}"
    elif shape == "quoted_eq":
        text = f'{key}="{secret} and more"'
    elif shape == "header":
        text = f"\n{draw(st.sampled_from(['', '  ', chr(9)]))}{key}:{draw(st.sampled_from([' ', '', chr(9)]))}{secret}"
    elif shape == "json":
        text = json.dumps({"user": "ann", key: secret}, indent=draw(st.sampled_from([None, 2])), ensure_ascii=False)
    elif shape == "repr":
        text = repr({key: secret, "n": 1})
    elif shape == "nested":
        text = json.dumps({key: {"value": secret, "n": 1}})
    else:
        text = repr({key: ["x", secret]})
    return draw(noise) + text + draw(noise)


@st.composite
def cases(draw):
    """(error, error's secret, payload, payload's secret): distinct secrets, since the payload's
    may show in the error where no rule reads it."""
    error_secret, payload_secret = draw(secrets), draw(secrets)
    if error_secret.lower()[:3] in payload_secret.lower():
        payload_secret = "Q" * 8
    error = draw(placed(error_secret))
    key = draw(key_words)
    payload = draw(st.sampled_from([{key: payload_secret}, {"invoice": 1, "auth": {key: payload_secret}},
                                    {"nested": {key: [payload_secret]}, "n": 2}]))
    return error, error_secret, payload, payload_secret


def stretches(secret, length=3):
    return {secret[i:j] for i in range(len(secret)) for j in range(i + length, len(secret) + 1)}


def shows(text, secret, length=4):
    """The stretches of `secret` (`length` characters or more) that `text` holds."""
    return [part for part in stretches(secret, length) if part in text]


FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FAST
@given(case=cases())
def test_no_stretch_of_a_masked_value_lists_the_run_or_shows_on_a_viewers_page(viewer_client, sql, case):
    error, secret, payload, payload_secret = case
    client = viewer_client
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, attempts, finished_at, last_error, last_stack, "
                      "error_type, payload) VALUES ('jobsweb.noop', 'dead', 1, now(), %s, %s, 'RuntimeError', %s) "
                      "RETURNING id", [error, error, json.dumps(payload)])
    page = shown(error, WORDS).lower()
    # The whole secret and its stretches of three (a guess one character longer each time), each
    # unless the page shows it elsewhere.
    for text in sorted({secret[i:i + 3] for i in range(len(secret) - 2)})[:12] + [secret]:
        if text.lower() in page:
            continue
        response = client.get("/runs", query_string={"q": text})
        assert response.status_code in (200, 400), (text, response.status_code)
        assert f'href="/runs/{run_id}"' not in response.get_data(as_text=True), (error, text)
    for url in (f"/runs/{run_id}", "/runs", "/runs?status=dead"):
        html = client.get(url).get_data(as_text=True)
        assert shows(html, secret, 6) == [] and shows(html, payload_secret, 6) == [], (url, error, payload)


@pytest.fixture
def viewer_client(sign_in, app):
    app.config["JOBSWEB_MASK_KEYS"] = WORDS
    return sign_in("viewer")


@FAST
@given(case=cases())
def test_no_incident_notification_or_log_line_shows_a_masked_value(app, receiver, sql, case, caplog):
    error, secret, payload, payload_secret = case
    app.config.update(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url, JOBSWEB_MASK_KEYS=WORDS)
    sql("TRUNCATE jobsweb_alert_incidents, jobsweb_alert_deliveries CASCADE")
    sql("DELETE FROM job_runs")
    receiver.posts.clear()
    sql("INSERT INTO job_runs (job_type, status, attempts, finished_at, last_error, error_type, payload) "
        "VALUES ('sec.generated', 'dead', 1, now(), %s, 'RuntimeError', %s)", [error, json.dumps(payload)])
    caplog.clear()
    with caplog.at_level(logging.INFO), app.app_context():
        alerts.evaluate()
        notify.deliver_due()
    seen = json.dumps([sql("SELECT summary FROM jobsweb_alert_incidents"),
                       sql("SELECT subject, body, data FROM jobsweb_alert_deliveries"), receiver.posts],
                      ensure_ascii=False, default=str) + caplog.text
    assert len(receiver.posts) == 1 and "sec.generated" in seen
    assert shows(seen, secret) == [] and shows(seen, payload_secret) == [], (error, seen)


def raising(ctx):
    error = RAISED["error"]  # a local of the handler's, in Sentry's frame variables
    raise RuntimeError(error)


RAISED = {}


@FAST
@given(case=cases())
def test_no_sentry_event_or_span_shows_a_masked_value(app, registry_snapshot, tracing, case):
    transport, exporter = tracing
    error, secret, payload, payload_secret = case
    RAISED["error"] = error
    transport.envelopes.clear()
    exporter.clear()
    with app.app_context():
        enqueue("test.mask.generated", payload)
        assert [run.status for run in drain()] == ["dead"]
    [event] = transport.events()
    spans = [{"attributes": dict(span.attributes), "events": [dict(e.attributes) for e in span.events],
              "status": span.status.description} for span in exporter.get_finished_spans()]
    seen = json.dumps([event, spans], ensure_ascii=False, default=str)
    assert len(spans) == 1 and "test.mask.generated" in seen
    assert shows(seen, secret) == [] and shows(seen, payload_secret) == [], (error, payload, seen)


@pytest.fixture
def tracing(app, registry_snapshot):
    app.config["JOBSWEB_MASK_KEYS"] = WORDS
    jobsweb.job("test.mask.generated", max_attempts=1)(raising)
    transport = Kept()
    sentry_sdk.init(dsn="https://key@sentry.example/1", transport=transport, traces_sample_rate=0,
                    include_local_variables=True)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sentry.init_app(app)
    otel.init_app(app, tracer_provider=provider)
    yield transport, exporter
    sentry_sdk.get_client().close()
    sentry_sdk.init()
