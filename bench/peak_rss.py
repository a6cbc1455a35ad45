"""A benchmark process's own peak RSS, which getrusage does not give a child of a big parent.

Linux keeps ru_maxrss across execve: the process's signal struct takes the high-water mark of
the memory it replaced, and subprocess starts a child with vfork, whose memory until its exec
is its parent's. So getrusage(RUSAGE_SELF).ru_maxrss in a worker that `python -m bench` started
is at least the bench's own peak: 147 MB "for a worker" on the second server of a full run, whose
bench process had built a million runs' pages first, against 95 MB on the first. VmHWM in
/proc/self/status is the high-water mark of this process's own memory, from its exec on.
"""

import resource


def own_peak_kb():
    """This process's peak resident set in kB, from its exec (VmHWM), or getrusage's off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
