"""POSTing one webhook, safely: the receiver's addresses are checked after DNS resolution, the
connection goes to the checked address (a second lookup cannot swap in another), and the whole
send, reply included, ends by one deadline.

Without the checks an admin could point an alert at the cloud metadata service or scan the
private network through the worker; without the deadline a server that trickles its reply one
byte at a time held the single sender thread for minutes.
"""

import http.client
import ipaddress
import socket
import ssl
import threading
from urllib.parse import quote, urlsplit

REPLY_CHARS = 500  # of a receiver's answer, kept for the error
URL_SAFE = "/?&=%:@!$'()*+,;~"  # left as they are in a path and query (RFC 3986 sub-delims, % escapes)
_NO_ANSWER = "no answer (refused, unreachable, or not whole within the {:g} s deadline)"


class WebhookError(Exception):
    """The receiver refused or could not be reached; the message says what happened."""


# NAT64's well-known prefix: IPv6-only networks reach IPv4 hosts through it (DNS64 answers with
# these), so such an address is judged by the IPv4 address in its last 32 bits.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
_KINDS = ("loopback", "private", "link_local", "multicast", "reserved", "unspecified")


def refused_address(address):
    """Why `address` may not receive webhooks ("loopback", "6to4-wrapped link-local", ...), or
    None if it may.

    Only globally reachable addresses pass: besides the named kinds, that refuses the shared
    address space 100.64.0.0/10 (carrier NAT, and cloud metadata at 100.100.100.200),
    documentation and benchmarking ranges. An IPv4 address carried inside an IPv6 one (mapped,
    NAT64, 6to4, either end of Teredo) is judged too: the packets end up there.
    """
    ip = ipaddress.ip_address(address)
    if getattr(ip, "ipv4_mapped", None):
        return refused_address(ip.ipv4_mapped)
    if ip.version == 6 and ip in NAT64:
        inner = refused_address(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        return inner and f"NAT64-wrapped {inner}"
    for wrapper, inner in _wrapped(ip):
        why = refused_address(inner)
        if why:
            return f"{wrapper}-wrapped {why}"
    for kind in _KINDS:
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if ip.is_global else "non-public"


def _wrapped(ip):
    """(tunnel, IPv4 address) for each IPv4 address a 6to4 or Teredo IPv6 address carries."""
    if ip.version == 4:
        return []
    return ([("6to4", ip.sixtofour)] if ip.sixtofour else []) + [("Teredo", end) for end in ip.teredo or ()]


def resolve(host, port, allow_private):
    """The address to connect to, after checking every address the name resolves to."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookError(f"cannot resolve {host}: {exc}") from None
    addresses = [info[4][0] for info in infos]
    if not allow_private:
        for address in addresses:
            why = refused_address(address)
            if why:
                raise WebhookError(f"{host} resolves to a {why} address ({address}); set "
                                   "JOBSWEB_ALERT_ALLOW_PRIVATE_IPS=true to send to private networks")
    return addresses[0]


class _Pinned:
    """Connects an http.client connection to one checked address; Host and TLS name stay the URL's."""

    def __init__(self, address):
        self.address = address

    def connect(self, connection):
        connection.sock = socket.create_connection((self.address, connection.port), connection.timeout)


class _HTTP(http.client.HTTPConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self.pinned = _Pinned(address)

    def connect(self):
        self.pinned.connect(self)


class _HTTPS(http.client.HTTPSConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.pinned = _Pinned(address)

    def connect(self):
        self.pinned.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)


def post(url, body, deadline, allow_private=False):
    """POST `body` (JSON bytes) to `url`, all of it within `deadline` seconds; WebhookError unless
    the receiver answered 2xx. Redirects are errors (a redirected POST loses its body)."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    try:
        port = parts.port or (443 if https else 80)
    except ValueError:
        raise WebhookError("the URL's port is not a number") from None
    address = resolve(parts.hostname, port, allow_private)
    connection = (_HTTPS if https else _HTTP)(parts.hostname, port, address, deadline)
    # A timer closes the socket at the deadline, whatever call is blocked on it then.
    expired = threading.Event()

    def expire():
        expired.set()
        if connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(deadline, expire)
    timer.daemon = True
    timer.start()
    try:
        # Percent-encoded as browsers do: http.client sends only ASCII, and a path such as /ü
        # raised UnicodeEncodeError; what is already escaped (%2F) stays as it is.
        path = quote((parts.path or "/") + (f"?{parts.query}" if parts.query else ""), safe=URL_SAFE)
        connection.request("POST", path, body=body, headers={
            "Content-Type": "application/json", "User-Agent": "jobsweb-alerts"})
        response = connection.getresponse()
        reply = response.read(REPLY_CHARS).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException):
        # One message for refused, reset, unreachable and too slow alike: telling them apart
        # would let whoever sets a webhook URL map which ports answer.
        raise WebhookError(_NO_ANSWER.format(deadline)) from None
    finally:
        timer.cancel()
        connection.close()
    if expired.is_set():
        raise WebhookError(_NO_ANSWER.format(deadline))
    if not 200 <= response.status < 300:
        raise WebhookError(f"HTTP {response.status} {response.reason}" + (f": {reply}" if reply else ""))
