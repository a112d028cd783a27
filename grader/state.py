"""The grader's own state in a course, all under `COURSE/.grader/`.

    executions/KEY.ipynb, KEY.json   finished sandboxed executions, keyed by content
    queue/KEY/                       planned executions (in.ipynb, work/, job.json)
    staging/                         nbgrader's throw-away output of the planning pass
    notes/ASSIGNMENT/STUDENT.json    grading notes (see `grader.notes`)
    autograde.lock                   held by the one running `grader autograde`

Everything here can be deleted between runs: executions are redone and notes
re-recorded by the next autograde. Every file is written with `write_atomic`, so a
process killed at any moment leaves either the old file or the new one.
"""

import json
from pathlib import Path

import nbformat

from grader.sandbox.atomic import write_atomic

STATE_DIR = ".grader"

__all__ = ["STATE_DIR", "CourseState", "ExecutionCache", "record_execution", "write_atomic"]


class CourseState:
    """The paths of a course's `.grader/` folder."""

    def __init__(self, course_root):
        self.course_root = Path(course_root)
        self.root = self.course_root / STATE_DIR

    @property
    def executions(self) -> Path:
        return self.root / "executions"

    @property
    def queue(self) -> Path:
        return self.root / "queue"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    # nbgrader takes its output folders relative to the course root
    STAGING_RELATIVE = f"{STATE_DIR}/staging"

    @property
    def autograde_lock(self) -> Path:
        return self.root / "autograde.lock"

    def notes_file(self, assignment, student) -> Path:
        return self.root / "notes" / assignment / f"{student}.json"


class ExecutionCache:
    """Executed notebooks by execution key, under `.grader/executions`."""

    def __init__(self, course_root):
        self.dir = CourseState(course_root).executions

    def get(self, key):
        """(notebook, meta) of a finished execution, or None."""
        path = self.dir / f"{key}.ipynb"
        if not path.exists():
            return None
        meta = json.loads((self.dir / f"{key}.json").read_text())
        return nbformat.read(str(path), as_version=4), meta

    def put(self, key, nb, meta) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        # meta first, notebook last: a notebook present means the entry is complete
        write_atomic(self.dir / f"{key}.json", json.dumps(meta))
        write_atomic(self.dir / f"{key}.ipynb", nbformat.writes(nb))


def record_execution(course_root, key, result) -> dict:
    """Keep a finished sandboxed execution (a `grader.sandbox.run.RunResult`) under `key`.

    The one way an execution is recorded, whether it ran from the parallel queue, from
    nbgrader's pipeline (the formgrader's autograde button) or for an assignment's proof,
    so all three are found by the next autograde. Returns the meta stored with it.
    """
    meta = {"reasons": result.reasons, "seconds": round(result.seconds, 2), "mode": result.mode}
    ExecutionCache(course_root).put(key, result.nb, meta)
    return meta
