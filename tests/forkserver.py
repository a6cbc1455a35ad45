"""Worker processes for the tests, forked from one that has already imported jobsweb.

`python -m flask --app wsgi run-jobs` spends about a second of CPU importing Flask, SQLAlchemy,
Alembic and jobsweb before it does anything, and the suite starts hundreds of them: on make
test's two loaded cores that was minutes. A fork server (as multiprocessing's "forkserver" start
method, and gunicorn's --preload) imports them once; each worker is then a fork of it that runs
`python -m <module> <args>` as the interpreter would: its own environment, working directory,
stdin/stdout/stderr, argv, signal handlers as Python sets them, and atexit and non-daemon
threads at its exit. Nothing of the app is built before the fork (never `wsgi`, which creates
one from the environment), so each child reads its settings and connects on its own.

The server is a separate process (never the pytest process, which has threads and database
connections): spawn() sends it the request and the three descriptors over a Unix socket; it
forks and answers with the child's pid and a pidfd (signals then reach that process and no
other, even once it has exited), and later with its wait status. ForkedProcess is the subset of
subprocess.Popen the tests use.
"""

import atexit
import fcntl
import gc
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What `flask --app wsgi run-jobs` imports before it reads its settings: done once, in the server.
# Not the tests' job types: each child imports them through JOBSWEB_HANDLERS, as a new process does.
PRELOAD = ("flask", "flask.cli", "click", "sqlalchemy", "psycopg", "alembic", "flask_migrate", "jobsweb",
           "jobsweb.app", "jobsweb.commands")
MESSAGE_BYTES = 1 << 20  # a request: argv, cwd and a whole environment, as JSON


# -- the server ---------------------------------------------------------------------------

def serve(listener, control):
    """Fork a child per request on `listener` until `control` (the client's pipe) closes."""
    for module in PRELOAD:
        __import__(module)
    gc.collect()
    gc.freeze()  # the imported modules' objects stay put: a child's collections do not copy their pages
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wakeup pipe
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    children = {}  # pid: the connection its wait status goes to
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                if not os.read(control, 1):
                    return  # the pytest process is gone: its children are killed by its fixtures
            elif key.fileobj is wake_read:
                while _drain(wake_read):
                    pass
                _reap(children)
            else:
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    # The child: nothing of the server's may outlive this point in it.
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for fd in (wake_read, wake_write, control):
                        os.close(fd)
                    listener.close()
                    for other in children.values():
                        other.close()
                    conn.close()
                    _run_child(request, fds)  # raises SystemExit: the interpreter exits as `python -m` would
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                socket.send_fds(conn, [json.dumps({"pid": pid}).encode()], [pidfd])
                os.close(pidfd)
                children[pid] = conn
                _reap(children)  # it may have exited already


def _drain(fd):
    try:
        return os.read(fd, 512)
    except BlockingIOError:
        return b""


def _reap(children):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.send(json.dumps({"status": status}).encode())
            except OSError:
                pass  # the client closed its end: nobody waits for this child
            conn.close()


def _receive(conn):
    message, fds, _, _ = socket.recv_fds(conn, MESSAGE_BYTES, 3)
    return json.loads(message), fds


def _run_child(request, fds):
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # `python -m` puts the working directory first on sys.path.
    sys.path[0] = request["cwd"]
    sys.argv = [request["module"], *request["args"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


# -- the client ---------------------------------------------------------------------------

_shared = None  # this process's ForkServer, started at the first python_m


def python_m(module, args, *, env, cwd=ROOT, stdout=None, stderr=None):
    """subprocess.Popen of `python -m module *args`, text output: a fork of this process's fork
    server, or a new interpreter when TEST_FORK_SERVER=0."""
    global _shared
    if os.environ.get("TEST_FORK_SERVER") == "0":
        return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=cwd, env=env, stdout=stdout,
                                stderr=stderr, text=True)
    if _shared is None:
        folder = tempfile.mkdtemp(prefix="jobsweb-forkserver-")
        _shared = ForkServer(ROOT, folder)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        atexit.register(_shared.close)
    return _shared.spawn(module, args, cwd, env, stdout, stderr)


def run_python_m(module, args, *, env, timeout, cwd=ROOT):
    """`python -m module *args` to its end, as subprocess.run would: (exit code, its stdout and
    stderr together); subprocess.TimeoutExpired past `timeout` seconds (the process is killed)."""
    proc = python_m(module, args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, output


class ForkServer:
    """The server process and the socket it listens on; spawn() is a Popen of `python -m`."""

    def __init__(self, root, folder):
        self.path = os.path.join(folder, "forkserver.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self.path)
        listener.listen(64)
        if listener.fileno() <= 2:
            # This process has no stdin (or stdout): the server's own stdio would cover the socket.
            moved = socket.socket(fileno=fcntl.fcntl(listener.fileno(), fcntl.F_DUPFD_CLOEXEC, 3))
            listener.close()
            listener = moved
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import os, socket, sys; from tests.forkserver import serve; "
             "serve(socket.socket(fileno=int(sys.argv[1])), 0)", str(listener.fileno())],
            cwd=root, stdin=subprocess.PIPE, pass_fds=[listener.fileno()], stdout=subprocess.DEVNULL)
        listener.close()

    def spawn(self, module, args, cwd, env, stdout=None, stderr=None, text=True):
        """A ForkedProcess running `python -m module *args` (stdout/stderr: None, a file, PIPE
        or STDOUT, as for Popen)."""
        return ForkedProcess(self.path, module, args, cwd, env, stdout, stderr, text)

    def close(self):
        self.proc.stdin.close()  # the server returns at its next look
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _stdin():
    """This process's stdin for the child, as Popen would leave it; /dev/null if it has none."""
    try:
        os.fstat(0)
        return 0
    except OSError:
        global _devnull
        if _devnull is None:
            _devnull = os.open(os.devnull, os.O_RDONLY)
        return _devnull


_devnull = None


class ForkedProcess:
    """What the tests use of subprocess.Popen, for a child of the fork server: stdout and stderr
    each None (this process's), a file, PIPE, or (stderr) STDOUT."""

    def __init__(self, path, module, args, cwd, env, stdout, stderr, text):
        self.args = [sys.executable, "-m", module, *args]
        self.returncode = None
        self.text = text
        self._read = {}  # a pipe's descriptor: the bytes read from it so far (kept across a timeout)
        close_after = []

        def target(stream, default):
            if stream == subprocess.PIPE:
                read, write = os.pipe()
                close_after.append(write)
                return open(read, "r" if text else "rb", closefd=True), write
            return None, default if stream is None else stream.fileno()

        self.stdout, out_fd = target(stdout, 1)
        if stderr == subprocess.STDOUT:
            self.stderr, err_fd = None, out_fd
        else:
            self.stderr, err_fd = target(stderr, 2)
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.conn.connect(path)
            request = {"module": module, "args": [str(a) for a in args], "cwd": str(cwd), "env": dict(env)}
            socket.send_fds(self.conn, [json.dumps(request).encode()], [_stdin(), out_fd, err_fd])
            message, fds, _, _ = socket.recv_fds(self.conn, MESSAGE_BYTES, 1)
        finally:
            for fd in close_after:
                os.close(fd)
        self.pid = json.loads(message)["pid"]
        self.pidfd = fds[0]

    def _status(self, timeout):
        """Wait up to `timeout` seconds (None: for ever) for the server to send the exit status."""
        if self.returncode is not None:
            return self.returncode
        self.conn.settimeout(timeout)
        try:
            message = self.conn.recv(MESSAGE_BYTES)
        except (TimeoutError, BlockingIOError):
            return None
        self.conn.close()
        os.close(self.pidfd)
        self.returncode = os.waitstatus_to_exitcode(json.loads(message)["status"]) if message else -1
        return self.returncode

    def poll(self):
        return self._status(0)

    def wait(self, timeout=None):
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):  # noqa: A002 - Popen's name
        if input is not None:
            raise ValueError("ForkedProcess has no stdin pipe")
        deadline = None if timeout is None else time.monotonic() + timeout
        pipes = [f for f in (self.stdout, self.stderr) if f is not None and not f.closed]
        with selectors.DefaultSelector() as selector:
            for pipe in pipes:
                os.set_blocking(pipe.fileno(), False)
                selector.register(pipe.fileno(), selectors.EVENT_READ)
                self._read.setdefault(pipe.fileno(), [])
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        self._read[key.fd].append(chunk)
                    else:
                        selector.unregister(key.fd)
        outputs = []
        for pipe in (self.stdout, self.stderr):
            if pipe is None or pipe.closed:
                outputs.append(None)
                continue
            data = b"".join(self._read.pop(pipe.fileno()))
            outputs.append(data.decode() if self.text else data)
            pipe.close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return tuple(outputs)

    def send_signal(self, sig):
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except ProcessLookupError:
                pass  # it exited and the server has reaped it: as Popen, nothing to signal

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)
