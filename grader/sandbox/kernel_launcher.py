"""Start an IPython kernel under resource limits (runs inside the sandbox).

Usage: python kernel_launcher.py LIMITS_JSON -f CONNECTION_FILE [kernel args...]

The limits are set with setrlimit just before exec'ing `python -m ipykernel_launcher`,
so they bind the kernel and everything it starts, and not the worker driving it.
"""

import json
import os
import resource
import sys

LIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "max_processes": resource.RLIMIT_NPROC,
    "max_file_bytes": resource.RLIMIT_FSIZE,
    "max_open_files": resource.RLIMIT_NOFILE,
    "cpu_seconds": resource.RLIMIT_CPU,
}


def main():
    limits = json.loads(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, which in LIMITS.items():
        value = limits.get(key)
        if value:
            resource.setrlimit(which, (value, value))
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[2:]])


if __name__ == "__main__":
    main()
