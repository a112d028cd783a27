"""Write a file so that a reader sees the old content or the new, never half of either.

Standard library only: the sandbox's worker imports it from inside the sandbox, where
nothing of the grader but this folder exists; the host side imports it through
`grader.state`.
"""

import os
from pathlib import Path


def write_atomic(path, data) -> None:
    """Write `data` (str or bytes) beside `path`, then rename it over `path` (atomic on POSIX)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    os.replace(tmp, path)
