"""`flask jobs exec NAME -- COMMAND`, as a crontab line runs it: a real `flask` process runs a
real command, passes its output and exit code on, and records the run."""

import ctypes
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import psycopg
import pytest

from jobsweb import definitions
from jobsweb.core.database import libpq_url
from tests.conftest import committed, wait_for
from tests.forkserver import python_m

PY = sys.executable


@pytest.fixture
def jobs_exec(app, spawn_worker):
    """jobs_exec(*args, wait=True): run `flask jobs exec ...` as a separate process."""
    started = []

    def run(*args, wait=True, **settings):
        proc = python_m("flask", ["--app", "wsgi", "jobs", "exec", *args], env=spawn_worker.env(**settings),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started.append(proc)
        if not wait:
            return proc
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture
def backup(app):
    with committed(app):
        definitions.define("backup", None, "0 3 * * *", external=True)
    return "backup"


def wait_until_exists(path):
    """A command (python -c) that runs until `path` exists: as long as the test needs it to."""
    return f"import os, time\nwhile not os.path.exists({str(path)!r}): time.sleep(0.02)"


def run_row(sql):
    [row] = sql("SELECT r.status, r.attempts, r.last_error, r.error_type, r.locked_by, a.outcome, a.output, "
                "a.worker LIKE 'exec:%%' FROM job_runs r JOIN job_attempts a ON a.run_id = r.id")
    return row


def test_a_command_that_exits_0_is_a_succeeded_run_and_its_output_is_passed_through_and_stored(
        backup, jobs_exec, sql):
    code, out, err = jobs_exec(backup, "--", PY, "-c",
                               "import sys; print('copied 3 files'); print('one warning', file=sys.stderr)")
    assert code == 0, err
    assert out == "copied 3 files\n" and "one warning\n" in err
    status, attempts, error, _, locked_by, outcome, output, by_exec = run_row(sql)
    assert (status, attempts, error, locked_by, outcome, by_exec) == ("succeeded", 1, None, None, "succeeded", True)
    assert "copied 3 files\n" in output and "one warning\n" in output
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("succeeded", 0)]


def test_a_command_that_exits_non_zero_is_a_dead_run_naming_the_exit_code_and_exec_exits_with_it(
        backup, jobs_exec, sql):
    code, _, _ = jobs_exec(backup, "--", PY, "-c", "import sys; print('disk full'); sys.exit(3)")
    assert code == 3
    status, _, error, error_type, _, outcome, output, _ = run_row(sql)
    assert (status, error, error_type, outcome) == ("dead", "exit code 3", "exit_code", "failed")
    assert output == "disk full\n"
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("dead", 1)]


def test_a_command_killed_by_a_signal_is_dead_naming_the_signal_and_exec_exits_128_plus_it(
        backup, jobs_exec, sql):
    code, _, _ = jobs_exec(backup, "--", PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert code == 128 + signal.SIGKILL
    status, _, error, error_type, *_ = run_row(sql)
    assert (status, error, error_type) == ("dead", "killed by signal 9 (SIGKILL)", "signal")


def test_only_the_tail_of_a_long_output_is_stored(backup, jobs_exec, sql):
    code, out, _ = jobs_exec(backup, "--", PY, "-c", "for i in range(5000): print(f'line {i:05d}')",
                             JOBSWEB_OUTPUT_MAX_CHARS=1000)
    assert code == 0 and out.count("\n") == 5000  # all of it passed through
    output = run_row(sql)[6]
    assert output.startswith("[earlier output cut]\n") and output.endswith("line 04999\n")
    assert len(output) <= 1000 + len("[earlier output cut]\n")


def test_a_command_over_its_timeout_is_stopped_and_recorded_as_a_timeout(backup, jobs_exec, sql):
    began = time.monotonic()
    code, _, _ = jobs_exec(backup, "--timeout", "1", "--", PY, "-c", "import time; time.sleep(60)")
    assert time.monotonic() - began < 30
    assert code == 128 + signal.SIGTERM
    status, _, error, error_type, *_ = run_row(sql)
    assert (status, error_type) == ("dead", "timeout")
    assert error.startswith("timed out after 1 s: stopped with SIGTERM")


def test_a_command_that_ignores_sigterm_gets_sigkill_after_the_kill_after_grace(backup, jobs_exec, sql):
    code, _, _ = jobs_exec(backup, "--timeout", "1", "--kill-after", "1", "--", PY, "-c",
                           "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    assert code == 128 + signal.SIGKILL
    error = run_row(sql)[2]
    assert error.startswith("timed out after 1 s: stopped with SIGKILL") and "signal 9" in error


def test_a_second_exec_while_the_first_runs_records_a_skipped_run_and_does_not_start_its_command(
        backup, jobs_exec, sql, tmp_path):
    marker, release = tmp_path / "second-ran", tmp_path / "release"
    first = jobs_exec(backup, "--", PY, "-c", wait_until_exists(release), wait=False)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0] == 1,
             message="the first exec's run")
    code, _, err = jobs_exec(backup, "--", PY, "-c", f"open({str(marker)!r}, 'w')")
    assert code == 0 and "skipped" in err
    assert not marker.exists()
    release.touch()
    first.communicate(timeout=60)
    rows = sql("SELECT status, reason FROM job_runs ORDER BY id")
    assert [status for status, _ in rows] == ["succeeded", "skipped"]
    assert rows[1][1] == f"previous run {sql('SELECT min(id) FROM job_runs')[0][0]} still running"


def test_two_execs_started_together_run_the_command_once(backup, jobs_exec, sql, tmp_path):
    count, release = tmp_path / "runs", tmp_path / "release"
    command = ["--", PY, "-c", f"open({str(count)!r}, 'a').write('x')\n{wait_until_exists(release)}"]
    procs = [jobs_exec(backup, *command, wait=False) for _ in range(2)]
    # The command goes on until both execs have recorded their run (however late the second
    # process starts), so the second always finds the first one running.
    wait_for(lambda: sql("SELECT count(*) FROM job_runs")[0][0] == 2, message="both execs' runs")
    release.touch()
    for proc in procs:
        proc.communicate(timeout=60)
    assert count.read_text() == "x"
    assert sorted(status for (status,) in sql("SELECT status FROM job_runs")) == ["skipped", "succeeded"]


def test_overlap_allow_runs_both_side_by_side(app, jobs_exec, sql, tmp_path):
    with committed(app):
        definitions.define("reindex", None, "0 3 * * *", external=True, overlap="allow")
    # Each command says it started, then runs until the other one has started too: both exit
    # only if they ran at the same time.
    command = (f"import os, sys, time\nopen(os.path.join({str(tmp_path)!r}, 'started-' + sys.argv[1]), 'w')\n"
               f"while len([f for f in os.listdir({str(tmp_path)!r}) if f.startswith('started-')]) < 2:\n"
               "    time.sleep(0.02)")
    procs = [jobs_exec("reindex", "--", PY, "-c", command, str(n), wait=False) for n in range(2)]
    for proc in procs:
        proc.communicate(timeout=60)
    assert [proc.returncode for proc in procs] == [0, 0]
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", 2)]
    # And the database saw them overlap: each attempt started before the other finished.
    assert sql("SELECT max(started_at) < min(finished_at) FROM job_attempts") == [(True,)]


def test_exec_works_for_a_definition_jobsweb_runs_too(app, jobs_exec, sql):
    with committed(app):
        definitions.define("nightly", "jobsweb.noop", "0 3 * * *")
    code, _, _ = jobs_exec("nightly", "--", "true")
    assert code == 0
    assert sql("SELECT status, job_type, scheduled_for FROM job_runs") == [("succeeded", "jobsweb.noop", None)]


def test_the_run_is_held_with_a_lease_and_heartbeats_while_the_command_runs(backup, jobs_exec, sql, tmp_path):
    release = tmp_path / "release"
    proc = jobs_exec(backup, "--", PY, "-c", wait_until_exists(release), wait=False, JOBSWEB_LEASE_SECONDS=1.5)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0] == 1,
             message="the exec's run")
    [(first_lease,)] = sql("SELECT locked_until FROM job_runs")
    wait_for(lambda: sql("SELECT locked_until > %s FROM job_runs", [first_lease])[0][0], timeout=10,
             message="a heartbeat to extend the lease")
    assert sql("SELECT locked_until > now(), locked_by LIKE 'exec:%%' FROM job_runs") == [(True, True)]
    release.touch()
    proc.communicate(timeout=60)
    assert sql("SELECT status FROM job_runs") == [("succeeded",)]


def test_an_exec_killed_outright_leaves_a_run_that_lease_recovery_ends_dead(
        backup, jobs_exec, sql, spawn_worker, tmp_path):
    pid_file = tmp_path / "pid"
    proc = jobs_exec(backup, "--", PY, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                     "time.sleep(60)", wait=False, JOBSWEB_LEASE_SECONDS=1)
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), message="the command to start")
    try:
        proc.kill()  # the command, in its own process group, is not killed with it
        proc.communicate()
        # A one-shot worker recovers leases once and exits when idle: start it once this one ran out.
        wait_for(lambda: sql("SELECT locked_until < now() FROM job_runs") == [(True,)], timeout=10,
                 message="the killed exec's lease to run out")
        worker = spawn_worker("--max-runtime", "4")
        wait_for(lambda: sql("SELECT status, error_type FROM job_runs") == [("dead", "lease_expired")], message="lease recovery to end the run")
        worker.wait(timeout=30)
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("args, words", [
    (["nosuch", "--", "true"], "no job definition is called 'nosuch'"),
    (["backup"], "give the command to run after --"),
])
def test_bad_exec_input_is_a_one_line_error_with_exit_code_2_and_nothing_started(
        backup, jobs_exec, sql, args, words):
    code, out, err = jobs_exec(*args)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_a_command_that_does_not_exist_is_a_dead_run_and_exit_code_127(backup, jobs_exec, sql):
    code, _, err = jobs_exec(backup, "--", "/nonexistent/backup.sh")
    assert code == 127 and "cannot start" in err
    status, _, error, error_type, *_ = run_row(sql)
    assert (status, error_type) == ("dead", "not_started") and "/nonexistent/backup.sh" in error


def test_an_operator_cancelling_the_run_stops_the_command_at_the_next_heartbeat(app, backup, jobs_exec, sql):
    from jobsweb.engine.runs import run_actions

    proc = jobs_exec(backup, "--", PY, "-c", "import time; time.sleep(60)", wait=False, JOBSWEB_LEASE_SECONDS=1.5)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0] == 1,
             message="the exec's run")
    [(run_id,)] = sql("SELECT id FROM job_runs")
    with committed(app):
        assert run_actions.cancel([run_id]) == ([], [run_id])  # running: the holder is asked to stop
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    status, _, error, error_type, _, outcome, _, _ = run_row(sql)
    assert (status, error_type, outcome) == ("cancelled", "cancelled", "cancelled")
    assert error.startswith("cancelled by an operator: stopped with SIGTERM")
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [(None, 0)]


@pytest.mark.parametrize("option, value", [("--timeout", "nan"), ("--timeout", "NaN"), ("--timeout", "inf"),
                                           ("--kill-after", "nan"), ("--kill-after", "-inf")])
def test_a_timeout_or_kill_after_of_nan_or_infinity_is_refused_naming_the_option(
        backup, runner, sql, option, value):
    result = runner.invoke(args=["jobs", "exec", backup, option, value, "--", "true"])
    assert result.exit_code == 2 and option in result.output and "Traceback" not in result.output
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def in_signal_mask(pid, mask_name, number):
    """Whether signal `number` is in process `pid`'s mask `mask_name` of /proc/PID/status."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith(f"{mask_name}:"))
    return bool(mask & (1 << (number - 1)))


def catches(pid, number):
    """Whether process `pid` has a handler for signal `number`."""
    return in_signal_mask(pid, "SigCgt", number)


def catching_command(got, ready):
    """A command (python -c) that writes the name of the first SIGTERM, SIGINT or SIGHUP it gets
    to `got` and exits 3; it writes its pid to `ready` once its handlers are set."""
    return ("import os, pathlib, signal, sys\n"
            "def on(number, frame):\n"
            f"    pathlib.Path({str(got)!r}).write_text(signal.Signals(number).name)\n"
            "    sys.exit(3)\n"
            "for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(number, on)\n"
            f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))\n"
            "while True:\n"
            "    signal.pause()")


@contextmanager
def catching_command_killed_if_never_signalled(got, ready):
    """Kill the catching command at the end if no signal reached it: in a process group of its
    own, it would outlive the exec that the fixture kills. (Not once `got` exists: it has
    exited then, and its pid may be another process's.)"""
    try:
        yield
    finally:
        if ready.exists() and ready.read_text() and not got.exists():
            os.kill(int(ready.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_sigterm_sigint_and_sighup_sent_to_exec_are_passed_on_to_the_command(backup, jobs_exec, sql, tmp_path, number):
    got, ready = tmp_path / "got", tmp_path / "ready"
    proc = jobs_exec(backup, "--", PY, "-c", catching_command(got, ready), wait=False)
    with catching_command_killed_if_never_signalled(got, ready):
        # The command has its handlers and exec its own (SIGHUP is caught only once exec passes
        # signals on; a Python process catches SIGINT from its start).
        wait_for(lambda: ready.exists() and ready.read_text() and catches(proc.pid, signal.SIGHUP),
                 message="the command and exec's handlers")
        proc.send_signal(number)
        proc.communicate(timeout=60)
    assert got.read_text() == signal.Signals(number).name
    assert proc.returncode == 3  # the command's exit code: exec itself was not stopped by the signal
    assert sql("SELECT status, last_error FROM job_runs") == [("dead", "exit code 3")]


def parent_of(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("PPid:"))


def test_sigterm_sent_to_exec_reaches_a_process_the_command_started_through_its_process_group(
        backup, jobs_exec, sql, tmp_path):
    # A shell that starts the real work (`sh -c 'pg_dump ... | gzip'`): a signal to the shell's
    # pid alone would leave the work running. This shell ignores SIGTERM and waits for its
    # child, so the command ends only once the grandchild got the signal, with its exit code.
    got, ready = tmp_path / "got", tmp_path / "ready"
    proc = jobs_exec(backup, "--", "sh", "-c", 'trap "" TERM; "$0" -c "$1" & wait $!', PY,
                     catching_command(got, ready), wait=False)
    with catching_command_killed_if_never_signalled(got, ready):
        wait_for(lambda: ready.exists() and ready.read_text() and catches(proc.pid, signal.SIGHUP),
                 message="the grandchild and exec's handlers")
        shell = parent_of(int(ready.read_text()))
        assert shell != proc.pid and parent_of(shell) == proc.pid  # exec's grandchild, the shell's child
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert got.read_text() == "SIGTERM"
    assert proc.returncode == 3  # the grandchild's exit code, passed on by the shell
    assert sql("SELECT status, last_error FROM job_runs") == [("dead", "exit code 3")]


SYS_TGKILL = {"x86_64": 234, "aarch64": 131}  # its syscall number: Python has no tgkill()


def test_a_signal_the_kernel_hands_to_another_thread_of_exec_is_passed_on_too(backup, jobs_exec, sql, tmp_path):
    # A signal sent to a process goes to whichever of its threads the kernel picks, and Python
    # runs the handler in the main thread only, once that runs bytecode: exec's main thread,
    # waiting for the command, must still notice a signal that another thread took. tgkill
    # gives it to one of them, as the kernel may.
    got, ready = tmp_path / "got", tmp_path / "ready"
    proc = jobs_exec(backup, "--", PY, "-c", catching_command(got, ready), wait=False)
    with catching_command_killed_if_never_signalled(got, ready):
        wait_for(lambda: ready.exists() and ready.read_text() and catches(proc.pid, signal.SIGHUP),
                 message="the command and exec's handlers")
        # The first thread exec started after the command (ids are handed out in order): the
        # heartbeat's, which runs as long as the command does. Not the thread that recorded the
        # start, which ends any moment, taking with it a signal given to it on its way out.
        command_pid = int(ready.read_text())
        threads = sorted(int(tid) for tid in os.listdir(f"/proc/{proc.pid}/task"))
        after = [tid for tid in threads if tid > command_pid]
        assert after, f"no thread of exec ({threads}) came after the command ({command_pid}): ids wrapped round?"
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(SYS_TGKILL[platform.machine()], proc.pid, after[0], signal.SIGTERM) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        proc.communicate(timeout=60)
    assert got.read_text() == "SIGTERM"
    assert proc.returncode == 3
    assert sql("SELECT status, last_error FROM job_runs") == [("dead", "exit code 3")]


def pending(pid, number):
    """Whether signal `number`, sent to process `pid`, waits for one of its threads to take it."""
    return in_signal_mask(pid, "ShdPnd", number)


def test_a_sigterm_before_the_command_starts_keeps_it_from_starting_and_ends_the_run_dead(
        backup, jobs_exec, sql, database_url_for_tests, tmp_path):
    # A supervisor's SIGTERM may come while exec records the start (here held by a lock on the
    # definition's row, as a slow database or a concurrent reporter would hold it). exec used
    # to catch signals only once the command ran: it died here, and one that came in the moment
    # between the command's start and its handlers left the command running, unseen by anyone.
    ran = tmp_path / "ran"
    with psycopg.connect(libpq_url(database_url_for_tests)) as holder:
        holder.execute("SELECT 1 FROM job_definitions WHERE name = %s FOR UPDATE", [backup])
        proc = jobs_exec(backup, "--", PY, "-c", f"open({str(ran)!r}, 'w')", wait=False,
                         JOBSWEB_EXEC_START_WAIT="60")
        wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND query LIKE '%%FROM job_definitions WHERE name%%'") == [(1,)],
                 message="exec's start to wait for the definition's lock")
        proc.send_signal(signal.SIGTERM)
        # Taken by one of exec's threads (the C handler has run) before the start can go on.
        wait_for(lambda: proc.poll() is not None or not pending(proc.pid, signal.SIGTERM),
                 message="exec to take the signal")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err  # exec itself was not killed by it
    assert not ran.exists()
    assert "jobsweb: SIGTERM came before the command started: it was not started" in err
    assert sql("SELECT r.status, r.last_error, a.outcome FROM job_runs r JOIN job_attempts a ON a.run_id = r.id") \
        == [("dead", "SIGTERM came before the command started: it was not started", "failed")]


def test_a_sigterm_while_exec_records_the_commands_end_does_not_kill_it_before_the_record(jobs_exec, tmp_path):
    # A system shutting down signals every process: the command has ended, and exec is writing
    # its outcome. A database that takes the connection and never answers holds that report for
    # seconds (its connect timeout), the window in which exec used to die of the SIGTERM, its
    # default handler restored: the outcome unwritten, lease recovery failed a command that
    # succeeded. Passed on to a group that has gone, the signal now leaves exec to finish.
    silent = socket.create_server(("127.0.0.1", 0))
    held = []  # connections taken and never answered, closed at the end

    def take():
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return  # closed

    threading.Thread(target=take, daemon=True).start()
    pid_file = tmp_path / "pid"
    try:
        proc = jobs_exec("backup", "--", PY, "-c", f"import os, pathlib; pathlib.Path({str(pid_file)!r}).write_text("
                         "str(os.getpid()))", wait=False, JOBSWEB_EXEC_START_WAIT="0.2",
                         DATABASE_URL=f"postgresql://jobsweb@127.0.0.1:{silent.getsockname()[1]}/jobsweb")
        wait_for(lambda: pid_file.exists() and pid_file.read_text() and
                 not os.path.exists(f"/proc/{pid_file.read_text()}"), message="the command to end and be reaped")
        # exec has left the command's wait: an exec that restores its handlers then does so within
        # moments; one that keeps them never stops catching SIGTERM until it exits.
        deadline = time.monotonic() + 1.0
        while catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.01)  # a poll of exec's state, not a wait for an outcome
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        silent.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 0, err  # the command's exit code, not -SIGTERM
    assert "the run was NOT recorded (succeeded)" in err, err


def test_a_silent_database_holds_the_command_back_half_a_second_and_no_more(jobs_exec, tmp_path):
    # docs/REFERENCE.md: "exec waits at most 0.5 s for the run's start to be recorded". A server
    # that takes the connection and never answers (a failover's silence) costs the command that
    # 0.5 s, measured from the connection to the command's first act.
    silent = socket.create_server(("127.0.0.1", 0))
    connected = []  # (the connection, held open and never answered; time.time() when it came)

    def take_one():
        conn, _ = silent.accept()
        connected.append((conn, time.time()))

    threading.Thread(target=take_one, daemon=True).start()
    started = tmp_path / "started"
    try:
        proc = jobs_exec("backup", "--", "touch", str(started), wait=False, JOBSWEB_EXEC_START_WAIT="0.5",
                         DATABASE_URL=f"postgresql://jobsweb@127.0.0.1:{silent.getsockname()[1]}/jobsweb")
        wait_for(started.exists, message="the command to start")
        proc.kill()  # the end's report would wait for the silent server a while longer
        _, err = proc.communicate(timeout=10)
    finally:
        silent.close()
        for conn, _ in connected:
            conn.close()
    held_back = started.stat().st_mtime - connected[0][1]
    # 0.5 s, less the connection's own set-up, plus touch's start (seconds of it on a loaded
    # machine); not the connect timeout (3 s)
    assert 0.45 <= held_back <= 2.5, held_back
    assert "its start is not recorded (database did not answer within 0.5 s)" in err, err
