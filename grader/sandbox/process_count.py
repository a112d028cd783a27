"""Whose processes count against a sandbox's process limit (RLIMIT_NPROC).

Grading as root, each concurrent sandbox runs under a uid of its own, so the limit is
its own. Grading as an ordinary user, every sandbox runs under that one uid, inside a
user namespace of its own (bwrap --unshare-user, unshare --user). Since Linux 5.14 the
kernel counts RLIMIT_NPROC per user namespace ("ucounts"), so each sandbox still has a
limit of its own; older kernels count every process of the real uid, the grader's and
the other sandboxes' included, and the limit has to make room for them.

The answer is measured once, not read from the kernel version (distributions
backport): a fresh user namespace under a limit of 2 processes forks once.
"""

import functools
import os
import subprocess
import sys

_FORK_UNDER_A_LIMIT_OF_TWO = (
    "import os, resource\n"
    "resource.setrlimit(resource.RLIMIT_NPROC, (2, 2))\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os._exit(0)\n"
    "os.waitpid(pid, 0)\n")


@functools.lru_cache(maxsize=None)
def counted_per_namespace(python: str = sys.executable) -> bool:
    """True when RLIMIT_NPROC in a new user namespace counts only that namespace's processes.

    False when it counts all of the uid's processes, or when this cannot be measured
    (no `unshare`, user namespaces disabled): the cautious answer. Meaningless as root,
    who is exempt from the limit.
    """
    try:
        probe = subprocess.run(["unshare", "--user", python, "-I", "-c", _FORK_UNDER_A_LIMIT_OF_TWO],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def processes_of(uid) -> int:
    """Threads (the kernel's unit for RLIMIT_NPROC) of every process owned by `uid`."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                pass
    return count


if __name__ == "__main__":  # `python process_count.py`: prints the answer for this user
    print("per-namespace" if counted_per_namespace() else "per-uid")
