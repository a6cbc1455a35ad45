"""The deployment pieces: gunicorn with the repository's gunicorn.conf.py, and the Procfile."""

import json
import os
import socket
import subprocess
import sys
import urllib.request

from jobsweb.core.database import libpq_url
from jobsweb.ops import notify
from tests.conftest import ROOT, committed, wait_for
from tests.test_logs import FORGING


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, headers=None):
    """(status, headers, body) of a GET; never raises on HTTP errors or a refused connection."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()
    except OSError:
        return None, None, None


def test_gunicorn_serves_the_app_with_the_repositorys_config(database_url_for_tests):
    port = free_port()
    env = dict(os.environ, DATABASE_URL=libpq_url(database_url_for_tests), SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-test", PORT=str(port),
               WEB_CONCURRENCY="2", JOBSWEB_PROXY_HOPS="1")
    # As the Procfile's web line runs it: gunicorn finds gunicorn.conf.py in the current directory.
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "wsgi:app"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        # Its first answers may be 503 on a loaded machine (the database not answering within
        # the health check's bound while gunicorn's processes start): ok once it is up.
        status, _, body = wait_for(lambda: (answer := get(f"{base}/healthz"))[0] == 200 and answer,
                                   message="gunicorn to answer 200")
        assert (status, body.strip()) == (200, '{"status":"ok"}')
        # Behind a TLS-terminating router: the app believes X-Forwarded-Proto and marks cookies Secure.
        status, headers, body = get(f"{base}/sign-in", {"X-Forwarded-Proto": "https"})
        assert status == 200 and "<form" in body
        assert "Secure" in headers["Set-Cookie"]
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    assert out.count("Booting worker") == 2
    assert '"GET /healthz HTTP/1.1" 200' in out and '"GET /sign-in HTTP/1.1" 200' in out


def test_the_procfile_names_the_web_worker_and_release_processes():
    lines = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip())
    assert lines == {"web": "gunicorn wsgi:app", "worker": "flask run-jobs --forever",
                     "release": "flask jobs migrate"}


def test_the_web_processs_lines_are_jobswebs_json_and_a_webhook_reply_cannot_forge_one(app, receiver, sql,
                                                                                        database_url_for_tests):
    receiver.fail_first, receiver.failure_reply = 99, FORGING.encode()
    port = free_port()
    env = dict(os.environ, DATABASE_URL=libpq_url(database_url_for_tests), PORT=str(port), WEB_CONCURRENCY="1",
               SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-test", JOBSWEB_LOG_FORMAT="json",
               JOBSWEB_ALERT_WEBHOOK_URL=receiver.url, JOBSWEB_ALERT_ALLOW_PRIVATE_IPS="true",
               JOBSWEB_ALERT_INTERVAL="0.2", JOBSWEB_WEB_ALERTS="true")
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = receiver.url
    with committed(app):
        notify.queue_test("ann@example.com")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "wsgi:app"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, message="gunicorn to answer")
        # The web process's alert thread sends the delivery, and logs the receiver's reply.
        wait_for(lambda: sql("SELECT last_error FROM jobsweb_alert_deliveries")[0][0],
                 message="the web process to try the delivery")
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    lines = [json.loads(line) for line in (out + err).splitlines()]  # each line is a JSON object
    loggers = {line["logger"] for line in lines}
    assert {"gunicorn.error", "gunicorn.access", "jobsweb.notify"} <= loggers
    [warning] = [line for line in lines if line["logger"] == "jobsweb.notify"]
    # Inside the one line's message (its terminal controls removed as a page removes them: the
    # delivery error is masked and cleaned before it is logged), not a line of its own.
    assert warning["level"] == "WARNING" and "down\n[2026-01-01 00:00:00,000] INFO in notify: all good" in warning["message"]
    assert "\x1b" not in out + err and "\u202e" not in out + err


def answers(url, timeout):
    """The status of a GET, or None when no answer came within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except OSError:
        return None


def test_each_slow_client_holds_a_thread_so_workers_times_threads_of_them_stall_the_site(database_url_for_tests):
    """What docs/DEPLOY.md says ("Slow clients"): with the shipped gunicorn settings, a client that
    sends its headers or its body slowly holds one thread for as long as it likes; with
    WEB_CONCURRENCY x WEB_THREADS of them /healthz stops answering, hence the buffering proxy."""
    port = free_port()
    env = dict(os.environ, DATABASE_URL=libpq_url(database_url_for_tests), PORT=str(port), WEB_CONCURRENCY="1",
               WEB_THREADS="4", SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-test")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "wsgi:app"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    healthz = f"http://127.0.0.1:{port}/healthz"
    slow = []

    def slow_client(start):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(start)
        slow.append(sock)

    try:
        wait_for(lambda: answers(healthz, 5) == 200, message="gunicorn to answer")
        # Unfinished headers, and a body of which 10 of 1,000 bytes came (the sign-in form reads it).
        for _ in range(2):
            slow_client(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow_client(b"POST /sign-in HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                    b"Content-Length: 1000\r\n\r\nemail=a%40")
        assert answers(healthz, 10) == 200  # three slow clients: one thread of the four is left
        slow_client(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        wait_for(lambda: answers(healthz, 2) is None, message="the fourth slow client to stall /healthz")
        for sock in slow:
            sock.close()
        wait_for(lambda: answers(healthz, 5) == 200, message="/healthz once the slow clients left")
    finally:
        for sock in slow:
            sock.close()
        server.terminate()
        server.communicate(timeout=30)
