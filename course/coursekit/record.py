"""What a graded run reports to the grader: the values each check compared, not its verdict.

In the grading sandbox the student's code shares its process with the test cells, so
nothing decided there can be trusted: a solution cell can replace a check, numpy's
asserts or this kit. The grader therefore decides outside (``grader.judge``). Every
check of ``coursekit.checks`` reports what it compared (the case, the value the code
under test produced, the value it was compared with and the tolerance) as an output of
the cell, in a MIME type of its own; the grader compares those values with the ones the
instructor's solution produced for the same case, in a run of its own that the student's
code never sees. A check that is skipped, patched away or fed other values shows up
there as a missing case or a wrong value.

Outside a graded run (JupyterLab, ``grader validate``) nothing is reported: the checks
raise as they always do, which is what a student working on the notebook wants.
"""
import base64
import os
from contextlib import contextmanager

import numpy as np

RECORD_VARIABLE = "COURSEKIT_RECORD"      # set by the grader for its runs
CHECK_TYPE = "application/vnd.coursekit.check+json"
DECLARATION_TYPE = "application/vnd.coursekit.declaration+json"

_task = [None]
_case = [None]


def recording() -> bool:
    return os.environ.get(RECORD_VARIABLE) == "1"


def encode(value):
    """A JSON form of a number, array or Tensor (float64 or int64 bytes, base64)."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    array = np.asarray(value)
    if array.dtype == object:
        return {"repr": repr(value)[:200]}
    kind = "int64" if array.dtype.kind in "biu" else "float64"
    array = np.ascontiguousarray(array, dtype=kind)
    return {"shape": list(array.shape), "dtype": kind, "data": base64.b64encode(array.tobytes()).decode()}


def decode(record):
    """The array of an ``encode``d value (None for a value that was no array)."""
    if not isinstance(record, dict) or "data" not in record:
        return None
    dtype = {"int64": np.int64, "float64": np.float64}.get(record.get("dtype"))
    if dtype is None:
        return None
    array = np.frombuffer(base64.b64decode(record["data"]), dtype=dtype)
    return array.reshape(record["shape"])


def _display(mime, payload):
    from IPython.display import display

    display({mime: payload}, raw=True)


def check(what, actual, expected, tol, derived=False):
    """Report one comparison of a check (only in a graded run)."""
    if not recording():
        return
    _display(CHECK_TYPE, {"task": _task[0], "case": _case[0], "what": str(what), "tol": float(tol),
                          "derived": bool(derived), "actual": encode(actual), "expected": encode(expected)})


def failure(label, error):
    """Report that the case ``label`` stopped with ``error``."""
    if not recording():
        return
    _display(CHECK_TYPE, {"task": _task[0], "case": str(label), "what": f"{label}: raised",
                          "error": f"{type(error).__name__}: {error}"[:300]})


def declare(package, assignment, tasks, blocked):
    """Report the assignment's withheld parts, paths under ``package``: the grader builds that
    package without them."""
    if not recording():
        return
    _display(DECLARATION_TYPE, {
        "package": package,
        "assignment": assignment,
        "tasks": {task: {name: [paths] if isinstance(paths, str) else list(paths)
                         for name, paths in names.items()} for task, names in tasks.items()},
        "blocked": list(blocked)})


def begin_case(label):
    """Checks made from now on report themselves as part of the case ``label`` (None: no case);
    the case is reported as it begins (a case of plain asserts has no check to report)."""
    _case[0] = None if label is None else str(label)
    if label is not None and recording():
        _display(CHECK_TYPE, {"task": _task[0], "case": _case[0], "begins": True})


@contextmanager
def scope(task):
    """Checks made inside report ``task`` as theirs."""
    _task[0] = task
    try:
        yield
    finally:
        _task[0] = None
