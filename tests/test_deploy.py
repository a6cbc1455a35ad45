"""The deployment pieces: gunicorn with the repository's gunicorn.conf.py, and the Procfile."""

import os
import socket
import subprocess
import sys
import urllib.request

from jobsweb.core.database import libpq_url
from tests.conftest import ROOT, wait_for


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
        status, _, body = wait_for(lambda: get(f"{base}/healthz")[0] and get(f"{base}/healthz"),
                                   timeout=30, message="gunicorn to answer")
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
