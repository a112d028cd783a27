"""A class of submissions of one of the course's assignments, graded by `grader` as an
instructor would: a course with the package and the kit visible to its sandbox, the
assignment generated, every submission in `submitted/` with one timestamp."""

import datetime
import shutil
import sys

import nbformat

from nbhelpers import ASSIGNMENTS, REPO

sys.path.insert(0, str(REPO / "autotests" / "grader"))
from grader_testkit import grader  # noqa: E402


def class_course(root, aid):
    """(course, home): a fresh course under `root` with `aid` generated from its source."""
    course, home = root / "course", root / "home"
    home.mkdir(parents=True)
    grader(["init", course, "--course-id", "dlsys", "--exchange", root / "exchange",
            "--package", "needle_kernels", "--package", "coursekit"], root, home)
    with open(course / "nbgrader_config.py", "a") as fh:
        # the notebooks load MNIST and compile Cython: room for two sandboxes on two busy cores
        fh.write("\nc.Execute.timeout = 180\nc.Sandbox.notebook_budget = 900\nc.Sandbox.memory_mb = 3072\n")
    shutil.copytree(ASSIGNMENTS / aid, course / "source" / aid,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    grader(["generate", aid, "--no-proof"], course, home)
    return course, home


def submit(course, aid, subs):
    """Each {student: notebook} submitted beside the release's other files, all at one time."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    for student, nb in subs.items():
        folder = course / "submitted" / student / aid
        shutil.copytree(course / "release" / aid, folder, ignore=shutil.ignore_patterns("*.ipynb"))
        nbformat.write(nb, folder / f"{aid}.ipynb")
        (folder / "timestamp.txt").write_text(stamp)


def autograded_errors(course, aid, students, tail):
    """{student: {grade id: the last `tail` characters of the error its cell printed}}."""
    out = {}
    for student in students:
        path = course / "autograded" / student / aid / f"{aid}.ipynb"
        if path.exists():
            out[student] = {c.metadata.get("nbgrader", {}).get("grade_id"): o.get("evalue", "")[-tail:]
                            for c in nbformat.read(path, as_version=4).cells
                            for o in c.get("outputs", []) if o.get("output_type") == "error"}
    return out
