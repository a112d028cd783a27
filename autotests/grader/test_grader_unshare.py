"""The fallback sandbox (`unshare`, for machines without bubblewrap), forced on a machine
that has both: two submissions graded in a row with the course's packages shown.

It keeps the host's root file system, so a mount point it made at the top level used
to stay behind: the second notebook then died on it and scored 0. Inside, the
checkout's source notebooks and history are hidden as well as the course.
"""

import datetime
import os
import time
from pathlib import Path

import nbformat
import pytest

from grader_testkit import REPO, gradebook_scores, grader, require_bwrap

pytestmark = pytest.mark.slow
COURSE_ID = "dlsys"
HOST_MOUNTS = ["/grader-packages", "/grader-job", "/tmp/grader-packages", "/tmp/grader-job"]
SOURCE_NOTEBOOK = REPO / "course" / "assignments" / "hw0" / "hw0.ipynb"


def meta(grade_id, solution=False, points=None):
    m = {"grade": points is not None, "solution": solution, "locked": not solution,
         "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        m["points"] = points
    return {"nbgrader": m}


def assignment(course_dir):
    """A notebook that needs both packages and looks for what the sandbox must hide."""
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell
    nb.cells = [
        cell("import needle_kernels as ndl\nimport coursekit\n\ndef double(x):\n"
             "    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
             metadata=meta("answer", solution=True)),
        cell("assert double(3) == 6\nassert ndl.Tensor([1.0, 2.0]).numpy().sum() == 3.0",
             metadata=meta("test_double", points=1)),
        cell("import os\n"
             f"for path in [{str(SOURCE_NOTEBOOK)!r}, {str(REPO / '.git' / 'HEAD')!r},\n"
             f"             {str(course_dir / 'gradebook.db')!r}, {str(course_dir / 'source')!r}]:\n"
             "    assert not os.path.exists(path), path\n"
             "assert coursekit.__file__",
             metadata=meta("test_hidden", points=1)),
    ]
    return nb


@pytest.fixture
def unshare_course(tmp_path):
    from grader.sandbox.confinement import probe

    ok, detail = probe("unshare")
    if not ok:
        pytest.skip(f"unshare cannot sandbox here: {detail}")
    return tmp_path


def test_unshare_grades_twice_in_a_row_with_packages(unshare_course):
    root = unshare_course
    before = {p for p in HOST_MOUNTS if os.path.lexists(p)}
    start = time.monotonic()
    home, course, exchange = root / "home", root / "course", root / "exchange"
    home.mkdir()
    grader(["init", course, "--course-id", COURSE_ID, "--exchange", exchange,
            "--package", "needle_kernels", "--package", "coursekit"], root, home)
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("c.Sandbox.mode = 'unshare'\nc.Execute.timeout = 60\nc.ExchangeCollect.check_owner = False\n")
    (course / "source" / "pk").mkdir(parents=True)
    nbformat.write(assignment(course), str(course / "source" / "pk" / "pk.ipynb"))
    tomorrow = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).isoformat()
    # the proof runs the solution and the release in the sandbox: two notebooks already
    generated = grader(["generate", "pk", "--due", tomorrow], course, home).stdout
    assert "the solution passes 2/2 tests" in generated, generated
    grader(["release", "pk"], course, home)
    for name, body in (("ada", "return 2 * x"), ("bob", "return x")):
        folder = root / "students" / name
        folder.mkdir(parents=True)
        common = ["--course-id", COURSE_ID, "--exchange", exchange, "--student", name]
        grader(["fetch", "pk", *common], folder, folder)
        path = folder / "pk" / "pk.ipynb"
        nb = nbformat.read(str(path), as_version=4)
        nb.cells[0].source = ("import needle_kernels as ndl\nimport coursekit\n\ndef double(x):\n"
                              f"    {body}")
        nbformat.write(nb, str(path))
        grader(["submit", "pk", *common], folder, folder)
    grader(["collect", "pk"], course, home)
    report = grader(["autograde", "pk", "-j", "1"], course, home).stdout
    assert "sandbox unshare" in report, report
    scores = gradebook_scores(course, "pk")
    assert {s: v["_raw"] for s, v in scores.items()} == {"ada": 2, "bob": 1}, report
    assert scores["bob"]["test_hidden"] == 1, scores
    # nothing of the sandbox is left on the host
    assert {p for p in HOST_MOUNTS if os.path.lexists(p)} == before
    print(f"\nmeasured: unshare graded 4 notebooks (proof and 2 submissions) with packages in "
          f"{time.monotonic() - start:.1f} s")


def test_unshare_hides_the_checkouts_secrets():
    from grader.sandbox.confinement import Confinement

    conf = Confinement(mode="unshare", readonly=[str(REPO)], hidden=[])
    hidden = conf.hidden_paths()
    assert str(REPO / "course" / "assignments") in hidden
    # an import path entry that is the whole checkout would show them again: left out
    assert str(REPO) not in conf.shown_paths()
    assert Path(REPO / "course" / "assignments").is_dir()


def test_generate_names_a_package_the_sandbox_cannot_import(tmp_path):
    """A course whose sandbox does not show needle_kernels: `grader generate` says so, and how."""
    require_bwrap()  # unshare shows the whole host, the checkout's packages included
    home, course = tmp_path / "home", tmp_path / "course"
    home.mkdir()
    grader(["init", course, "--course-id", COURSE_ID, "--exchange", tmp_path / "exchange"], tmp_path, home)
    assert "'needle_kernels', 'coursekit'" in (course / "nbgrader_config.py").read_text()  # by default
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("c.Sandbox.packages = []\nc.Sandbox.mode = 'bwrap'\nc.Execute.timeout = 60\n")
    (course / "source" / "pk").mkdir(parents=True)
    nbformat.write(assignment(course), str(course / "source" / "pk" / "pk.ipynb"))
    failed = grader(["generate", "pk"], course, home, check=False)
    assert failed.returncode == 1
    assert ("coursekit, needle_kernels are not importable inside the sandbox: grader init --package coursekit "
            "--package needle_kernels") in failed.stderr, failed.stderr
