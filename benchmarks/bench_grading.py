"""How long `grader autograde ASSIGNMENT -j N` takes for a class: a script, not a test.

    python benchmarks/bench_grading.py [--assignment hw1] [--students 100] [--jobs 2]

Builds a course in a temporary folder with the assignment generated from
course/assignments, and a class of distinct submissions as a real class hands them in:
most complete (each with its own comment, so no two notebooks are the same execution),
some missing one task (a different one in turn), a few untouched releases. Then grades
them once in the sandbox, as an instructor would, and prints the wall time with the
machine's CPU model. Each submission is run against the package without every task's
parts, and again per failing task (grader/graded_run.py), so the mix matters.
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def grader(args, cwd, home):
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "grader", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"grader {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def task_of(cell):
    match = re.match(r"^([A-Za-z0-9]+_t\d+)", cell.metadata.get("nbgrader", {}).get("grade_id", ""))
    return match.group(1) if match else None


def class_of(source, release, students):
    """{student: notebook}: 70% complete, 20% missing one task, 10% the release."""
    released = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.cells
                if c.metadata.get("nbgrader", {}).get("solution")}
    tasks = sorted({task_of(c) for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")} - {None})
    out = {}
    for i in range(students):
        nb = nbformat.from_dict(source) if i % 10 != 9 else nbformat.from_dict(release)
        dropped = tasks[i % len(tasks)] if i % 10 in (7, 8) else None
        first = True
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if not meta.get("solution"):
                continue
            if dropped and task_of(cell) == dropped:
                cell.source = released[meta["grade_id"]]
            elif first:
                cell.source = f"# student {i:03d}\n" + cell.source
                first = False
        out[f"student{i:03d}"] = nb
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--assignment", default="hw1")
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    opts = parser.parse_args()
    aid = opts.assignment
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        root = Path(tmp)
        course, home = root / "course", root / "home"
        home.mkdir()
        grader(["init", course, "--course-id", "bench", "--exchange", root / "exchange",
                "--package", "needle_kernels", "--package", "coursekit"], root, home)
        shutil.copytree(REPO / "course" / "assignments" / aid, course / "source" / aid,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        grader(["generate", aid, "--no-proof"], course, home)
        source = nbformat.read(course / "source" / aid / f"{aid}.ipynb", as_version=4)
        release = nbformat.read(course / "release" / aid / f"{aid}.ipynb", as_version=4)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        for student, nb in class_of(source, release, opts.students).items():
            folder = course / "submitted" / student / aid
            shutil.copytree(course / "release" / aid, folder, ignore=shutil.ignore_patterns("*.ipynb"))
            nbformat.write(nb, folder / f"{aid}.ipynb")
            (folder / "timestamp.txt").write_text(stamp)
        start = time.perf_counter()
        out = grader(["autograde", aid, "-j", opts.jobs], course, home)
        seconds = time.perf_counter() - start
        print(out.strip().splitlines()[-1] if out.strip() else "")
        print(f"{aid}: {opts.students} submissions autograded with -j {opts.jobs} in {seconds:.0f} s "
              f"({seconds / 60:.1f} min) on {os.cpu_count()} CPUs of {cpu_model()}")


if __name__ == "__main__":
    main()
