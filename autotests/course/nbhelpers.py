"""Helpers for the course tests: find notebooks, execute them, run nbgrader in a temp course.

Every notebook runs in a fresh kernel from the current interpreter's environment
with the repository on ``PYTHONPATH``, so ``import needle_kernels`` finds the
working tree. ``NEEDLE_DATA_DIR`` is passed through unchanged: CI points it at
the real data, elsewhere the notebooks write small files in the real formats.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]
COURSE = REPO / "course"
LECTURES = COURSE / "lectures"
ASSIGNMENTS = COURSE / "assignments"
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "build", "course_build", ".ipynb_checkpoints",
             "release", "submitted", "autograded", "feedback", ".pytest_cache", ".hypothesis"}

TASK_ID = re.compile(r"\b(hw[0-9a-z]*_t\d+)\b")
# a generous margin over the one-minute target for a lecture on 2 cores
LECTURE_SECONDS = float(os.environ.get("NEEDLE_LECTURE_SECONDS", "150"))


def all_notebooks():
    """Every ``*.ipynb`` of the repository outside virtualenvs, builds and nbgrader working folders."""
    found = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".venv"))
        found += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".ipynb")]
    return found


def lecture_notebooks():
    return sorted(LECTURES.glob("*.ipynb"))


def assignment_ids():
    return sorted(p.name for p in ASSIGNMENTS.iterdir() if (p / f"{p.name}.ipynb").is_file())


def kernel_env(extra=None):
    """Environment of a notebook kernel: the repository importable, one BLAS thread per worker."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env.update(extra or {})
    return env


def execute_notebook(path, timeout=600, cwd=None, env=None):
    """Execute ``path`` top to bottom in a fresh python3 kernel; returns (notebook, seconds).

    ``env`` is the kernel's environment, ``kernel_env()`` when not given.
    """
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(cwd or Path(path).parent)}})
    t0 = time.perf_counter()
    client.execute(env=kernel_env() if env is None else env)
    return nb, time.perf_counter() - t0


# --- nbgrader in a temporary course directory --------------------------------

def make_course(tmp, assignment):
    """A throwaway nbgrader course at ``tmp`` holding the course config and one assignment source."""
    tmp = Path(tmp)
    shutil.copy(COURSE / "nbgrader_config.py", tmp / "nbgrader_config.py")
    shutil.copy(COURSE / "nbgrader_task_stubs.py", tmp / "nbgrader_task_stubs.py")
    shutil.copytree(ASSIGNMENTS / assignment, tmp / "assignments" / assignment,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return tmp


def nbgrader(course, *args, timeout=900):
    """Run the ``nbgrader`` command line in ``course``; raises with its log on failure."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=course, env=kernel_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr


def submit(course, assignment, student, notebook):
    """Place ``notebook`` as ``student``'s submission of ``assignment`` (plus the released support files)."""
    dest = Path(course) / "submitted" / student / assignment
    src = Path(course) / "release" / assignment
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.ipynb"), dirs_exist_ok=True)
    shutil.copy(notebook, dest / f"{assignment}.ipynb")
    return dest


def grades(course, assignment, student):
    """{grade_id: (score, max_score)} of ``student``'s autograded ``assignment``, read from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        sub = gb.find_submission(assignment, student)
        out = {}
        for nb in sub.notebooks:
            for grade in nb.grades:
                out[grade.name] = (grade.score, grade.max_score)
        return out


def grade_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def solution_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def output_text(nb):
    """All text a notebook's code cells printed (streams, results, errors)."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                parts.append(o.get("text", ""))
            elif o.get("output_type") in ("execute_result", "display_data"):
                parts.append(str(o.get("data", {}).get("text/plain", "")))
            elif o.get("output_type") == "error":
                parts.append(o.get("evalue", ""))
    return "".join(parts)


def real_mnist_available():
    """True when ``$NEEDLE_DATA_DIR`` is set and holds the real MNIST test images."""
    from needle_kernels.data import paths

    root = os.environ.get(paths.ENV_VAR)
    return bool(root) and (Path(root).expanduser() / "mnist" / "t10k-images-idx3-ubyte.gz").is_file()


def assert_ran_as_a_lecture(name, nb, seconds):
    """An executed lecture kept to the time limit, and used real MNIST whenever it is present."""
    from needle_kernels.data import paths
    from needle_kernels.data.loaders import FALLBACK_NOTICE

    assert seconds <= LECTURE_SECONDS, (
        f"{name} took {seconds:.0f}s to execute, over the {LECTURE_SECONDS:.0f}s limit "
        f"(target: about a minute; override with NEEDLE_LECTURE_SECONDS)")
    if real_mnist_available():
        fell_back = [line for line in output_text(nb).splitlines() if FALLBACK_NOTICE in line]
        assert not fell_back, f"{name} used generated data although {paths.ENV_VAR} holds real MNIST: {fell_back}"
