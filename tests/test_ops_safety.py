"""Issue 16 outside the web pages: webhooks that cannot reach private networks or hold the sender,
log lines that cannot be forged, the secret key and the gunicorn workers."""

import logging
import os
import socket
import stat
import threading
import time

import pytest

from jobsweb.app import create_app
from jobsweb.core.errors import ConfigError
from jobsweb.core.logs import JsonFormatter, TextFormatter
from jobsweb.ops import notify, webhook
from tests.alert_receivers import Receiver
from tests.conftest import ROOT, committed


@pytest.mark.parametrize("address, kind", [("127.0.0.1", "loopback"), ("10.1.2.3", "private"),
                                           ("192.168.0.1", "private"), ("169.254.169.254", "link-local"),
                                           ("224.0.0.1", "multicast"), ("::1", "loopback"),
                                           ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"),
                                           ("fd00::1", "private")])
def test_private_and_special_addresses_are_refused(address, kind):
    assert webhook.refused_address(address) is not None
    assert webhook.refused_address("93.184.216.34") is None


@pytest.mark.parametrize("address, kind", [
    ("100.100.100.200", "non-public"), ("100.64.0.1", "non-public"), ("198.18.0.1", "private"),
    ("192.0.2.10", "private"), ("2002:a9fe:a9fe::1", "6to4-wrapped private"),
    ("2002:7f00:1::1", "6to4-wrapped loopback"),
    ("2001:0:4136:e378:8000:63bf:3f57:fdf2", "Teredo-wrapped private"),
    ("64:ff9b::a9fe:a9fe", "NAT64-wrapped private"), ("::127.0.0.1", "reserved"), ("2001:db8::1", "private")])
def test_shared_documentation_and_tunnelled_private_addresses_are_refused(address, kind):
    assert webhook.refused_address(address) == kind


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700::1111", "2002:808:808::1", "64:ff9b::808:808",
                                     "::ffff:8.8.8.8"])
def test_public_addresses_and_tunnels_to_them_may_receive_webhooks(address):
    assert webhook.refused_address(address) is None


def test_a_webhook_to_loopback_is_refused_unless_private_addresses_are_allowed():
    receiver = Receiver()
    try:
        with pytest.raises(notify.SendError, match="resolves to a loopback address"):
            notify.post_webhook(receiver.url, "hi", {}, 5, allow_private=False)
        assert receiver.posts == []
        notify.post_webhook(receiver.url, "hi", {}, 5, allow_private=True)
        assert receiver.texts() == ["hi"]
    finally:
        receiver.close()


def test_the_setting_refuses_private_addresses_by_default(app, sql, monkeypatch):
    receiver = Receiver()
    try:
        app.config.update(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url, JOBSWEB_ALERT_ALLOW_PRIVATE_IPS=False)
        with committed(app):
            notify.queue_test("ann@example.com")
        with app.app_context():
            assert notify.deliver_due() == 0
        [(error,)] = sql("SELECT last_error FROM jobsweb_alert_deliveries")
        assert "loopback address" in error and "JOBSWEB_ALERT_ALLOW_PRIVATE_IPS" in error
    finally:
        receiver.close()


def test_a_trickling_receiver_cannot_hold_the_sender_past_the_deadline():
    """It answers one byte every 0.2 s for 20 s: the send must end by its 1 s deadline."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def trickle():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(notify.SendError, match="not whole within the 1 s deadline"):
            notify.post_webhook(f"http://127.0.0.1:{listener.getsockname()[1]}/", "hi", {}, 1.0, allow_private=True)
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        listener.close()


def test_connect_errors_do_not_say_whether_a_port_is_open_or_filtered():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens
    with pytest.raises(notify.SendError) as refused:
        notify.post_webhook(f"http://127.0.0.1:{port}/x", "hi", {}, 2, allow_private=True)
    assert str(refused.value) == (f"could not POST to http://127.0.0.1:{port}/…: no answer (refused, unreachable, "
                                  "or not whole within the 2 s deadline)")


@pytest.mark.parametrize("url, shown", [("https://hooks.example.com?token=abc", "https://hooks.example.com/…"),
                                        ("https://hooks.example.com/?token=abc", "https://hooks.example.com/…"),
                                        ("https://user:pw@hooks.example.com/x", "https://hooks.example.com/…"),
                                        ("https://hooks.example.com", "https://hooks.example.com")])
def test_redact_hides_paths_query_strings_and_credentials(url, shown):
    assert notify.redact(url) == shown


def test_a_text_log_line_cannot_be_split_by_a_line_break():
    record = logging.LogRecord("jobsweb.worker", logging.WARNING, __file__, 1, "run 1 failed: %s",
                               ("boom\r\n2026-01-01 INFO jobsweb.worker: run 2 succeeded",), None)
    line = TextFormatter().format(record)
    assert "\n" not in line and "\r" not in line and "boom\\r\\n2026-01-01" in line
    assert "\n" not in JsonFormatter().format(record)


def test_an_alert_email_for_a_name_with_a_line_break_cannot_be_made(app):
    from jobsweb.core.errors import InvalidInput
    from jobsweb.scheduling.definitions import define

    with app.app_context(), pytest.raises(InvalidInput, match="name"):
        define("nightly\nBcc: all@example.com", "jobsweb.noop", "@daily")


def test_the_local_secret_key_file_is_private_from_the_start(tmp_path):
    from jobsweb.app import _local_secret_key

    key_file = tmp_path / "secret_key"
    key = _local_secret_key(key_file)
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600 and len(key) >= 32
    assert _local_secret_key(key_file) == key
    assert os.listdir(tmp_path) == ["secret_key"]  # no temporary file left behind


def test_a_short_secret_key_is_refused(database_url_for_tests):
    with pytest.raises(ConfigError, match="SECRET_KEY must be at least 32 characters"):
        create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "SECRET_KEY": "x"})


def test_two_slow_clients_do_not_stop_gunicorn_answering_others(database_url_for_tests):
    import subprocess
    import sys
    import urllib.request

    from jobsweb.core.database import libpq_url
    from tests.conftest import SECRET_KEY, wait_for
    from tests.test_deploy import free_port, get

    port = free_port()
    # One process, as the repository's gunicorn.conf.py runs it: a slow client must hold a
    # thread of it, not the whole of it.
    env = dict(os.environ, DATABASE_URL=libpq_url(database_url_for_tests), SECRET_KEY=SECRET_KEY, PORT=str(port),
               WEB_CONCURRENCY="1")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "wsgi:app"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    slow = []
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(f"{base}/healthz")[0] == 200, timeout=60, message="gunicorn to answer")
        for _ in range(2):  # requests whose headers never end
            client = socket.create_connection(("127.0.0.1", port))
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(client)
        # With one thread (or sync workers) the process would sit reading the first slow client.
        with urllib.request.urlopen(f"{base}/healthz", timeout=30) as response:
            assert response.status == 200
    finally:
        for client in slow:
            client.close()
        server.terminate()
        server.wait(timeout=30)


def test_the_standalone_app_limits_every_request(app):
    assert app.config["MAX_CONTENT_LENGTH"] == 1024 * 1024

