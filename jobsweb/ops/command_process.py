"""The command `flask jobs exec` runs, as a process: which signals reach it and how it is stopped.

It runs in a process group of its own (ops/command_runs.py starts it so), so that a timeout's
signal reaches every process it started; for the same reason a terminal's ^C or a supervisor's
SIGTERM to exec would not reach it, and exec passes them on (Forwarder)."""

import os
import signal
import subprocess
import threading

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Seconds of one Popen.wait while a command without a timeout runs: any bound makes it poll.
WAIT_SLICE = 60.0


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Forwarder:
    """exec's handler of FORWARDED_SIGNALS, set before its start is recorded and kept until its
    end is. A signal that comes before the command exists is kept in `early`: it keeps the
    command from starting, or, if it came as the command started, is passed on once it has.
    Set after the command's start, a signal in between killed exec and left the command running
    unseen; restored before the report, one then killed exec with the outcome unwritten. Python
    runs a handler in the main thread between two of its bytecodes, so reading `command` and
    appending to `early` are one step as far as the code that sets them is concerned."""

    def __init__(self):
        self.command = None
        self.early = []  # signal numbers that came before the command existed
        self.previous = {}

    def __enter__(self):
        self.previous = {number: signal.signal(number, self._received) for number in FORWARDED_SIGNALS}
        return self

    def __exit__(self, *exc_info):
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _received(self, number, frame):
        if self.command is None:
            self.early.append(number)
        else:
            self.command.signal(number)

    def follow(self, command):
        """Pass signals on to `command` from now on, and those that came while it started."""
        self.command = command
        while self.early:
            command.signal(self.early.pop(0))


class Command:
    """The command's process, and how it is stopped: SIGTERM to its process group, SIGKILL
    `kill_after` seconds later if it is still there."""

    def __init__(self, proc, kill_after):
        self.proc = proc
        self.kill_after = kill_after
        self.stopped_with = None  # the last signal a timeout or a cancel sent
        self.cancelled = threading.Event()

    def signal(self, number):
        try:
            os.killpg(self.proc.pid, number)
        except ProcessLookupError:
            pass

    def stop(self):
        """SIGTERM, then SIGKILL after kill_after; returns once the command has exited."""
        self.stopped_with = signal.SIGTERM
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(self.kill_after)
        except subprocess.TimeoutExpired:
            self.stopped_with = signal.SIGKILL
            self.signal(signal.SIGKILL)
            self.proc.wait()

    def cancel(self):
        """An operator cancelled the run (from the heartbeat thread): stop the command."""
        if not self.cancelled.is_set():
            self.cancelled.set()
            threading.Thread(target=self.stop, name="jobsweb-exec-cancel", daemon=True).start()

    def wait(self, timeout):
        """Wait for the command; past `timeout` seconds (None: none), stop it. Whether it timed out."""
        # Always with a timeout, so that Popen.wait polls (sleeps of 50 ms at most) instead of
        # blocking in waitpid: Python runs a signal handler only in the main thread, between
        # bytecodes, so a signal to pass on that the kernel hands to another thread (a pump's,
        # the heartbeat's), or that comes just before the waitpid, would otherwise wait for
        # the command to end on its own.
        while True:
            try:
                self.proc.wait(WAIT_SLICE if timeout is None else timeout)
                return False
            except subprocess.TimeoutExpired:
                if timeout is not None:
                    self.stop()
                    return True
