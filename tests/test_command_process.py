"""How signals reach the command `flask jobs exec` runs (jobsweb/ops/command_process.py): real
signals to this process, a real command in a process group of its own."""

import os
import signal
import subprocess
import sys

from jobsweb.ops.command_process import Command, Forwarder


def test_a_signal_that_came_while_the_command_started_is_passed_on_once_it_has():
    # exec's handlers are set before the command starts: a signal in the moment between the
    # check that none came and the command's start is kept, and passed on when it exists.
    before = signal.getsignal(signal.SIGTERM)
    with Forwarder() as forwarder:
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler in this thread, before the next line
        assert forwarder.early == [signal.SIGTERM]
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        try:
            forwarder.follow(Command(proc, kill_after=10.0))
            assert proc.wait(timeout=30) == -signal.SIGTERM
        finally:
            proc.kill()
            proc.wait()
        assert forwarder.early == []
    assert signal.getsignal(signal.SIGTERM) is before
