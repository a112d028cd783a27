"""Copy detection and suspicious constructs, calibrated on solutions written for the purpose.

``fixtures/honest/`` holds solutions of the assignments written independently, as different
students would write them; ``fixtures/copies/`` holds near-copies (names changed, statements
reordered, dead statements added, expressions split into temporaries) of the package's code, of
a lecture's and of another student's (``EXPECTED`` says which unit copies what). Each assignment's
class is its instructor's solution handed in as one more student, its honest fixtures and its
copies, graded by ``grader.similarity.similarity`` on a course folder like the one ``grader``
keeps.

``python autotests/grader/test_similarity.py`` prints every unit's best overlap with the package,
the lectures and the other students: the figures the thresholds were chosen on.
"""
import functools
import sys
import time
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fixtures"))
sys.path.insert(0, str(HERE.parents[1]))
import submissions  # noqa: E402

from grader import similarity as sim  # noqa: E402
from grader import notes  # noqa: E402
from grader.course import Course  # noqa: E402
from grader.suspicious import suspicious_constructs  # noqa: E402

INSTRUCTOR = "instructor"
# (copy fixture, definition): what its overlap note must name. hw1_package's _axes_heavy, the
# pasted helper with one disguise more than _axes_of, is the edge of what is found: the figures
# show it, no note is required of it
EXPECTED = {
    ("hw1_package", "_axes_of"): "the package's needle_kernels.shapes.normalize_axes",
    ("hw1_package", "compute_gradient_of_variables"):
        "the package's needle_kernels.autograd.compute_gradient_of_variables",
    ("hw1_lecture", "compute_gradient_of_variables"): "lecture 05_autodiff_implementation",
    ("hw1_carol", "BroadcastTo"): "hw1_alice",
    ("hw1_carol", "Summation"): "hw1_alice",
    ("hw1_carol", "compute_gradient_of_variables"): "hw1_alice",
    ("hw1_carol", "nn_epoch"): "hw1_alice",
    ("lab1_leo", "cy_forward"): "lab1_kate",
    ("lab1_leo", "cy_grad_W"): "lab1_kate",
    ("lab1_leo", "cuda_forward"): "lab1_kate",
}


def assignments():
    names = set(submissions.fixtures("honest")) | set(submissions.fixtures("copies"))
    return sorted({submissions.assignment_of(n) for n in names})


def make_course(root, aid, students):
    """A course folder with ``aid``'s release and one submitted notebook per student."""
    course = Course(root=Path(root), config=Config())
    release = course.path("release", aid)
    release.mkdir(parents=True)
    nbformat.write(submissions.release_notebook(aid), release / f"{aid}.ipynb")
    for student, cells in students.items():
        folder = course.path("submitted", student, aid)
        folder.mkdir(parents=True)
        nbformat.write(submissions.submission(aid, cells), folder / f"{aid}.ipynb")
    return course


def class_of(aid):
    """{student: cells}: the instructor's solution, the honest fixtures and the copies of ``aid``."""
    students = {INSTRUCTOR: submissions.instructor(aid)}
    for kind in ("honest", "copies"):
        students.update({name: submissions.load(path) for name, path in submissions.fixtures(kind, aid).items()})
    return students


@functools.lru_cache(maxsize=None)
def graded(aid, root):
    course = make_course(Path(root) / aid, aid, class_of(aid))
    start = time.perf_counter()
    report = sim.similarity(course, aid, lectures=submissions.REPO / "course" / "lectures")
    seconds = time.perf_counter() - start
    found = {student: notes.instructor_lines(course.root, aid, student) for student in class_of(aid)}
    return report, found, seconds


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("similarity"))


@pytest.mark.parametrize("aid", assignments())
def test_honest_solutions_get_no_note(aid, root):
    _, found, _ = graded(aid, root)
    honest = set(submissions.fixtures("honest", aid))
    copies = set(submissions.fixtures("copies", aid))
    for student in honest:
        # a copier's note names the student copied from, which says nothing against them
        own = [line for line in found[student] if not any(c in line for c in copies)]
        assert not own, f"{student}: {own}"


@pytest.mark.parametrize("copy, name", sorted(EXPECTED))
def test_near_copies_are_noted(copy, name, root):
    aid = submissions.assignment_of(copy)
    _, found, _ = graded(aid, root)
    lines = [line for line in found[copy] if f" {name} " in line]
    assert any(EXPECTED[(copy, name)] in line for line in lines), f"{copy} {name}: {found[copy]}"


@pytest.mark.parametrize("aid", ["hw2", "hw3", "lab1"])
def test_released_scaffolding_is_nobody_s_copy(aid, root):
    """Students who fill every solution region with ``pass`` hand in the scaffolding alone: the
    same code, all of it the release's, so nothing is anybody's copy."""
    source = submissions.source_notebook(aid)
    empty = {submissions.meta(c)["grade_id"]: ["pass"] * len(submissions.REGION.findall(c.source))
             for c in source.cells if submissions.meta(c).get("solution")}
    course = make_course(Path(root) / f"scaffolding_{aid}", aid, {"a": empty, "b": empty, "c": empty})
    report = sim.similarity(course, aid, lectures=submissions.REPO / "course" / "lectures")
    assert not (report.package or report.lectures or report.shared or report.suspicious), sim.similarity_lines(report)


def test_a_class_of_thirty_takes_seconds(root):
    aid = "hw2"
    base = class_of(aid)
    students = {f"s{i:02d}": cells for i, cells in enumerate(list(base.values()) * 10)}
    students = dict(list(students.items())[:30])
    course = make_course(Path(root) / "thirty", aid, students)
    sim.package_index.cache_clear()
    start = time.perf_counter()
    sim.similarity(course, aid, lectures=submissions.REPO / "course" / "lectures")
    seconds = time.perf_counter() - start
    assert seconds < 30, f"similarity of 30 submissions took {seconds:.1f} s"


# ---- suspicious constructs ---------------------------------------------------------------------

NOTEBOOK = "import numpy as np\nimport needle_kernels as ndl\nimport coursekit\nfrom coursekit import checks\n"


@pytest.mark.parametrize("code, what", [
    ("m = __import__('course' + 'kit.checks')", "'coursekit.checks'"),
    ("import importlib\nm = importlib.import_module('needle_kernels.ops')", "importlib"),
    ("exec(open('x.py').read())", "exec"),
    ("f = eval('lambda: 1')", "eval"),
    ("code = compile('1', 'x', 'eval')", "compile"),
    ("import gc\nobjs = gc.get_objects()", "gc"),
    ("def f(g):\n    return g.__code__", "__code__"),
    ("def f(g):\n    return g.__globals__['x']", "__globals__"),
    ("b = __builtins__", "__builtins__"),
    ("import sys\nframe = sys._getframe(1)", "_getframe"),
    ("import inspect\nframe = inspect.currentframe()", "currentframe"),
    ("def f(frame):\n    return frame.f_back.f_locals", "f_back"),
    ("import ctypes", "ctypes"),
    ("import subprocess\nsubprocess.run(['ls'])", "subprocess"),
    ("import multiprocessing", "multiprocessing"),
    ("import os\nos.system('ls')", "os.system"),
    ("import os\npid = os.fork()", "os.fork"),
    ("import sys\nsys.modules['x'] = None", "sys.modules"),
    ("coursekit.checks.close = lambda *a, **k: True", "coursekit.checks.close"),
    ("np.testing.assert_allclose = print", "np.testing.assert_allclose"),
    ("setattr(checks, 'close', print)", "checks.close"),
    ("setattr(ndl.ops, 'Summation', object)", "ndl.ops.Summation"),
    ("vars(checks)['close'] = print", "checks"),
    ("t = np.testing\nt.assert_allclose = print", "t.assert_allclose"),
    ("m = __import__('coursekit')\nm.checks.close = print", "m.checks.close"),
    ("import builtins\nbuiltins.print = None", "builtins"),
    ("from os import system", "os.system"),
    ("get_ipython().ast_transformers.append(None)", "get_ipython"),
])
def test_suspicious_constructs_are_named(code, what):
    found = suspicious_constructs(code, "", NOTEBOOK + code)
    assert any(what in line for line in found), (code, found)


def test_own_objects_and_comments_are_not_suspicious():
    code = ('class Layer:\n    def __init__(self, x):\n        self.x = x\n'
            'def step(params, lr):\n    for p in params:\n        p.data = p.data - lr * p.grad\n'
            'layer = Layer(1)\nlayer.x = 2\n# gc, exec and __code__ in a comment are nothing\n'
            's = "sys.modules"\n')
    assert suspicious_constructs(code, "", NOTEBOOK + code) == []


def test_what_the_release_already_does_is_not_the_student_s():
    released = "import coursekit\ncoursekit.start('x', {})"
    assert suspicious_constructs(released + "\nx = 1", released, released) == []


@pytest.mark.parametrize("aid", assignments())
def test_honest_and_instructor_solutions_are_not_suspicious(aid):
    release = submissions.release_notebook(aid)
    released = {submissions.meta(c).get("grade_id"): c.source for c in release.cells}
    for student, cells in class_of(aid).items():
        if student in submissions.fixtures("copies"):
            continue
        sources = submissions.solution_sources(aid, cells)
        context = "\n".join(c.source for c in release.cells if c.cell_type == "code")
        for gid, source in sources.items():
            assert suspicious_constructs(source, released.get(gid, ""), context) == [], (student, gid)


# ---- the figures -------------------------------------------------------------------------------

def figures():
    """Rows (kind, student, cell, definition, own, package %, lecture %, student %) of every class."""
    rows = []
    copies = set(submissions.fixtures("copies"))
    for aid in assignments():
        comparison = sim.Comparison(sim.given_code(submissions.release_notebook(aid)),
                                    lectures=submissions.REPO / "course" / "lectures")
        for student, cells in class_of(aid).items():
            comparison.add_student(student, submissions.solution_sources(aid, cells))
        for student, units in comparison.units.items():
            kind = "copy" if student in copies else "honest"
            for gid, name, fp in units:
                if fp.own < sim.MIN_OWN:
                    continue
                def best(index, **kw):
                    found = [m for m in index.matches(fp, threshold=0.0, **kw)
                             if kind == "copy" or m[2] not in copies]
                    return (found[0][0], found[0][1] if not isinstance(found[0][1], tuple) else found[0][1][0]) \
                        if found else (0, "")
                # the instructor's solution follows the package: only its overlap with students counts
                reference = student != INSTRUCTOR
                rows.append((kind, student, gid, name, int(fp.own),
                             best(comparison.package) if reference else (0, ""),
                             best(comparison.lectures) if reference else (0, ""),
                             best(comparison.students, exclude_owner=student), sim.threshold_of(fp)))
    return rows


if __name__ == "__main__":
    rows = figures()
    for row in sorted(rows, key=lambda r: (r[0], -max(r[5][0], r[6][0], r[7][0]))):
        kind, student, gid, name, own, package, lecture, other, threshold = row
        print(f"{kind:6s} {student:12s} {name[:30]:30s} own {own:4d}  threshold {round(100 * threshold)}%  "
              f"package {package[0]:3d}% {package[1][-45:]:45s} lecture {lecture[0]:3d}% {lecture[1][:32]:32s} "
              f"student {other[0]:3d}% {other[1]}")
    for language in ("python", "kernel"):
        def kind_of(row):
            return (row[8] == sim.KERNEL_THRESHOLD) == (language == "kernel")
        honest = [max(r[5][0], r[6][0], r[7][0]) for r in rows if r[0] == "honest" and kind_of(r)]
        copied = [max(r[5][0], r[6][0], r[7][0]) for r in rows
                  if r[0] == "copy" and kind_of(r) and (r[1], r[3].split(" [kernel")[0]) in EXPECTED]
        threshold = sim.KERNEL_THRESHOLD if language == "kernel" else sim.THRESHOLD
        print(f"{language}: threshold {round(100 * threshold)}%; {len(honest)} honest definitions, highest "
              f"{max(honest, default=0)}%; {len(copied)} near-copies, lowest {min(copied, default=0)}%")
