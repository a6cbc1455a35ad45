"""A TCP proxy on 127.0.0.1 in front of a test server, with the faults of a real network.

    proxy = FaultProxy(("127.0.0.1", 5432))      # listens on proxy.port
    proxy.latency = 0.2      # each chunk, either way, arrives 0.2 s after it was sent, in order
                             # (a long link: chunks in flight together are all 0.2 s late, as
                             # netem's delay makes them, not 0.2 s more each)
    proxy.reset()            # every open connection is reset (RST), as a server crash does
    proxy.refuse = True      # new connections are reset at once (down, or out of slots)
    proxy.blackhole = True   # connections are accepted and nothing is forwarded either way:
                             # what a failover or a dropped NAT entry looks like (no error
                             # until some timeout of the client's own)
    proxy.blackhole = False  # the path is back; connections held in the hole are reset,
                             # as a peer that lost their state answers them
    proxy.hold_new = True    # new connections are accepted and wait, unanswered (a server slow
                             # to take them: a connect under way); proxy.held counts them
    proxy.hold_new = False   # the held ones go through to the server, as if it answered now
    proxy.close()

Only ever a loopback address: the tests start it in front of their own server.
"""

import queue
import select
import socket
import struct
import threading
import time

CHUNK = 65536


class FaultProxy:
    def __init__(self, target):
        self.target = target  # (host, port), or the path of a Unix socket
        self.latency = 0.0  # seconds added to each chunk, either way
        self.refuse = False
        self._blackhole = False
        self._hold_new = False
        self.held = 0  # connections held by hold_new so far
        self._waiting = []  # client sockets held, to go through when hold_new ends
        # Times a client sent after it had been answered: its round trips (with some latency set,
        # so that no answer arrives while a client is still sending what it sends at once).
        self.round_trips = 0
        self._last_from = {}  # connection: who sent the last chunk forwarded, "client" or "server"
        self.lock = threading.Lock()
        self.pairs = set()  # (client socket, server socket) of each open connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def url(self, url):
        """`url` (a libpq URL to the target) made to go through this proxy."""
        from sqlalchemy.engine import make_url

        direct = make_url(url).difference_update_query(["host", "port"])  # a socket folder, for one
        return direct.set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    @property
    def blackhole(self):
        return self._blackhole

    @blackhole.setter
    def blackhole(self, on):
        with self.lock:
            was, self._blackhole = self._blackhole, on
        if was and not on:
            self.reset()

    @property
    def hold_new(self):
        return self._hold_new

    @hold_new.setter
    def hold_new(self, on):
        with self.lock:
            self._hold_new = on
            waiting, self._waiting = (self._waiting, []) if not on else ([], self._waiting)
        for client in waiting:
            self._forward(client)

    def reset(self):
        """Reset every open connection (RST to the client, close to the server)."""
        with self.lock:
            pairs, self.pairs = list(self.pairs), set()
        for pair in pairs:
            for sock in pair:
                _reset(sock)

    def close(self):
        self.closed = True
        self.listener.close()
        self.reset()
        self.hold_new = False  # the held ones: reset (closed)

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refuse:
                _reset(client)
                continue
            if self._blackhole:  # accepted, never answered; reset when the path is back
                with self.lock:
                    self.pairs.add((client,))
                continue
            with self.lock:
                if self._hold_new:  # accepted; goes through when hold_new ends
                    self._waiting.append(client)
                    self.held += 1
                    continue
            self._forward(client)

    def _forward(self, client):
        """Connect `client` to the target and pump both ways."""
        if self.closed:
            _reset(client)
            return
        try:
            server = _connect(self.target)
        except OSError:
            _reset(client)
            return
        pair = (client, server)
        with self.lock:
            self.pairs.add(pair)
        threading.Thread(target=self._pump, args=(client, server, pair), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, pair), daemon=True).start()

    def _pump(self, source, sink, pair):
        line = _DelayLine(sink, self)
        try:
            while not self.closed:
                readable, _, _ = select.select([source], [], [], 0.1)
                if not readable:
                    continue
                if self._blackhole:  # read nothing: the client's data waits, unanswered
                    time.sleep(0.05)
                    continue
                data = source.recv(CHUNK)
                if not data:
                    break
                if not self._blackhole:  # else lost in the hole
                    self._count(source is pair[0], pair)
                    line.put(data, time.monotonic() + self.latency)
        except (OSError, ValueError):  # reset meanwhile: the socket is closed
            pass
        finally:
            line.finish()
            with self.lock:
                self.pairs.discard(pair)
            for sock in pair:
                _reset(sock)


    def _count(self, from_client, pair):
        with self.lock:
            if from_client and self._last_from.get(pair) != "client":
                self.round_trips += 1
            self._last_from[pair] = "client" if from_client else "server"


class _DelayLine:
    """One direction of a connection: chunks sent on, in order, each at its own due time (the
    chunk's arrival plus the latency then), by a thread of its own, so that a chunk's delay does
    not add to the next one's."""

    def __init__(self, sink, proxy):
        self.sink = sink
        self.proxy = proxy
        self.chunks = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="fault-proxy-line", daemon=True)
        self.thread.start()

    def put(self, data, due):
        self.chunks.put((due, data))

    def finish(self):
        """Send what is still on the line (a client's last message), then end its thread."""
        self.chunks.put(None)
        self.thread.join()

    def _serve(self):
        while (item := self.chunks.get()) is not None:
            due, data = item
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            if self.proxy._blackhole or self.proxy.closed:
                continue  # lost in the hole
            try:
                self.sink.sendall(data)
            except OSError:  # reset meanwhile
                continue


def _connect(target):
    """A connection to (host, port), or to a Unix socket's path (the embedded server's)."""
    if isinstance(target, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(target)
        return sock
    return socket.create_connection(target, timeout=5)


def _reset(sock):
    """Close with RST (SO_LINGER 0), as a crashed peer's kernel answers."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass
