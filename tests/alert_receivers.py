"""Real receivers for alert tests: a webhook endpoint on loopback and an SMTP mailbox."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook endpoint on loopback that records each POST; it answers 500 to the first
    `fail_first` requests, and only once `answering` is set (clear it to keep a sender waiting)."""

    def __init__(self):
        self.posts = []
        self.paths = []  # as the request line said them
        self.fail_first = 0
        self.failure_reply = b"receiver is down"
        self.answering = threading.Event()
        self.answering.set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.posts.append(body)
                    receiver.paths.append(self.path)
                    failing = len(receiver.posts) <= receiver.fail_first
                receiver.answering.wait()
                self.send_response(500 if failing else 200)
                self.end_headers()
                self.wfile.write(receiver.failure_reply if failing else b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/secret-token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def texts(self):
        with self.lock:
            return [post["text"] for post in self.posts]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Mailbox:
    """aiosmtpd handler: keeps every message it is given."""

    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, envelope.content.decode()))
        return "250 OK"
