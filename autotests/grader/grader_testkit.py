"""Helpers for the grader tests: run the `grader` command, hash folders, read the gradebook."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_once(tmp_path_factory, name, build):
    """`build()` once per test session, its result shared by every pytest-xdist worker.

    The slow end-to-end flows would otherwise run once in each worker that receives
    one of their tests. The first worker to take the lock builds; the others wait for
    the pickled result (which refers to that worker's temporary folders).
    """
    import fcntl
    import pickle

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this session
    result_file = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result_file.exists():
            return pickle.loads(result_file.read_bytes())
        result = build()
        result_file.write_bytes(pickle.dumps(result))
        return result


def require_bwrap():
    """Skip only where this machine cannot create namespaces at all; where it can and the
    grader's sandbox still does not start, that is a failure of the grader, not of the machine."""
    sys.path.insert(0, str(REPO))
    from grader.sandbox.confinement import diagnose

    state, detail = diagnose("bwrap")
    if state == "grader-fault":
        pytest.fail(f"bubblewrap works on this machine but the grader cannot use it: {detail}")
    if state == "machine-forbids":
        pytest.skip(f"bubblewrap cannot sandbox here: {detail}")


def environment(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBGRADER"))}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), USER=os.environ.get("USER", "instructor"),
               PYTHONDONTWRITEBYTECODE="1",
               # nbgrader's gradebook runs `alembic` from PATH; the suite may run unactivated
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return env


def grader(args, cwd, home, check=True, timeout=600):
    """Run `python -m grader ARGS` in `cwd`; returns the CompletedProcess."""
    proc = subprocess.run([sys.executable, "-m", "grader", *map(str, args)], cwd=str(cwd),
                          env=environment(home), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"grader {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


class Completed:
    """What `grader_inprocess` returns: the same fields as subprocess.CompletedProcess."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def grader_inprocess(args, cwd, home, check=True):
    """`grader ARGS` through `grader.cli.main` in this process (no interpreter start-up).

    For the many quick student commands; HOME and the working directory are switched
    for the call and restored after it.
    """
    import contextlib
    import io

    sys.path.insert(0, str(REPO))
    from grader.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    os.environ.update(environment(home))
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    result = Completed(code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"grader {' '.join(map(str, args))} exited {code}\n"
                             f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def tree_hashes(root, skip=()):
    """{relative path: sha256} of every file under `root`, except under the `skip` prefixes."""
    root = Path(root)
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(rel == s or rel.startswith(s + "/") for s in skip):
            continue
        if path.is_file() and not path.is_symlink():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            found[rel + "/"] = "dir"
    return found


def forget_grades(course_dir, assignment):
    """Remove every submission of `assignment` from the gradebook, as if it was never graded."""
    sys.path.insert(0, str(REPO))
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{Path(course_dir) / 'gradebook.db'}", "dlsys") as gb:
        for sub in list(gb.assignment_submissions(assignment)):
            gb.remove_submission(assignment, sub.student_id)


def gradebook_scores(course_dir, assignment):
    """{student: {grade_id: score}} plus '_raw', '_penalty' and '_seconds_late' per student."""
    sys.path.insert(0, str(REPO))
    from nbgrader.api import Gradebook

    result = {}
    with Gradebook(f"sqlite:///{Path(course_dir) / 'gradebook.db'}", "dlsys") as gb:
        for sub in gb.assignment_submissions(assignment):
            scores = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            scores["_raw"] = sub.score
            scores["_penalty"] = sub.late_submission_penalty or 0.0
            scores["_seconds_late"] = sub.total_seconds_late
            result[sub.student_id] = scores
    return result
