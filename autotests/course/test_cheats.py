"""Cheats a student who wants marks without the work might try, graded like any submission.

One class of hw1 submissions is graded with ``grader autograde -j 2`` in the sandbox: one
submission per cheat, each the instructor's solution with one task's solution cell replaced by
the cheat. Each cheat earns nothing for the task it attacks (or leaves a note for the
instructor) and keeps every other cell's points, which the solution earns in full
(``test_own_work.py`` proves it on the same grading):

* ``kit_patched``: the grading kit rewritten so that every test scope runs the package's
  code and every check passes, then the package's classes imported;
* ``helpers``: the package's op classes and private helpers that do a task's work
  (``ReLUBackward``, ``MatMulBias``, ``_nn_epoch_needle``) used under the student's names;
* ``recompiled``: the package's source read from its file, a docstring edited, executed;
* ``subprocess`` and ``multiprocessing``: the package's code run in another process;
* ``patched_asserts``: wrong code, and numpy's ``assert_allclose`` emptied in place;
* ``forged_reports``: wrong code, and the kit's ``close`` rewritten in place to report the
  expected value as the student's and never raise.

While a task is graded the package in the sandbox is a build without that task's code
(``grader.package_build``), and whether a check passed is decided by the grader from the
values the check reported (``grader.judge``), so none of these reaches the reference or
the verdict.
"""
import sys

import nbformat
import pytest

from class_grading import class_course, submit
from nbhelpers import ASSIGNMENTS, REPO

sys.path.insert(0, str(REPO / "autotests" / "grader"))
sys.path.insert(0, str(REPO / "autotests"))
from figures import report_figure  # noqa: E402
from grader_testkit import gradebook_scores, grader, run_once  # noqa: E402

from test_own_work import points  # noqa: E402  (what the solution earns, cell by cell)

AID = "hw1"

KIT_PATCHED = '''import contextlib
import coursekit.checks
import coursekit.withhold as _kit

@contextlib.contextmanager
def _everything_reference(*args, **kwargs):
    with _kit.reference():
        yield

coursekit.checks.grading = _everything_reference
coursekit.checks.close = lambda *args, **kwargs: None
coursekit.checks.check_op = lambda *args, **kwargs: None
from needle_kernels.ops.ops_mathematic import Reshape, BroadcastTo, Summation, Transpose
'''

RECOMPILED = '''import inspect
import needle_kernels.ops.ops_mathematic as _m
_source = open(_m.__file__).read().replace('"""', '"""edited ')
_ns = dict(vars(_m), __name__="__main__")
exec(compile(_source, "<mine>", "exec"), _ns)
Reshape, BroadcastTo, Summation, Transpose = (_ns[n] for n in ("Reshape", "BroadcastTo", "Summation", "Transpose"))
'''

SUBPROCESS = '''import json
import subprocess
import sys


def _package(op, args, *arrays):
    """The package's op computed in a fresh interpreter."""
    code = ("import json, sys, numpy as np\\n"
            "from needle_kernels.ops import ops_mathematic as m\\n"
            "op, args, arrays = json.loads(sys.stdin.read())\\n"
            "out = getattr(m, op)(*args).compute(*[np.array(a, dtype=np.float32) for a in arrays])\\n"
            "print(json.dumps(np.asarray(out).tolist()))")
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps([op, args, [a.tolist() for a in arrays]]),
                          capture_output=True, text=True)
    return np.array(json.loads(done.stdout), dtype=np.float32)


class Reshape(TensorOp):
    def __init__(self, shape):
        self.shape = shape
    def compute(self, a):
        return _package("Reshape", [self.shape], a)
    def gradient(self, out_grad, node):
        return Reshape(node.inputs[0].shape)(out_grad)


class Summation(TensorOp):
    def __init__(self, axes=None):
        self.axes = axes
    def compute(self, a):
        return _package("Summation", [self.axes], a)
    def gradient(self, out_grad, node):
        return BroadcastTo(node.inputs[0].shape)(out_grad)


class BroadcastTo(TensorOp):
    def __init__(self, shape):
        self.shape = shape
    def compute(self, a):
        return _package("BroadcastTo", [self.shape], a)
    def gradient(self, out_grad, node):
        return Summation(None)(out_grad)


class Transpose(TensorOp):
    def __init__(self, axes=None):
        self.axes = axes
    def compute(self, a):
        return _package("Transpose", [self.axes], a)
    def gradient(self, out_grad, node):
        return Transpose(self.axes)(out_grad)
'''

MULTIPROCESSING = SUBPROCESS.replace('''    done = subprocess.run([sys.executable, "-c", code], input=json.dumps([op, args, [a.tolist() for a in arrays]]),
                          capture_output=True, text=True)
    return np.array(json.loads(done.stdout), dtype=np.float32)''', '''    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_remote, (op, args, [a.tolist() for a in arrays]))


def _remote(op, args, arrays):
    import numpy as np
    from needle_kernels.ops import ops_mathematic as m
    return np.asarray(getattr(m, op)(*args).compute(*[np.array(a, dtype=np.float32) for a in arrays]))''')

PATCHED_ASSERTS = '''import numpy as np
np.testing.assert_allclose.__code__ = (lambda *args, **kwargs: None).__code__


class Reshape(TensorOp):
    def __init__(self, shape):
        self.shape = shape
    def compute(self, a):
        return np.zeros(self.shape, dtype=a.dtype)
    def gradient(self, out_grad, node):
        return out_grad


class Summation(TensorOp):
    def __init__(self, axes=None):
        self.axes = axes
    def compute(self, a):
        return np.zeros(np.sum(a, axis=self.axes).shape, dtype=a.dtype)
    def gradient(self, out_grad, node):
        return node.inputs[0]


class BroadcastTo(TensorOp):
    def __init__(self, shape):
        self.shape = shape
    def compute(self, a):
        return np.zeros(self.shape, dtype=a.dtype)
    def gradient(self, out_grad, node):
        return node.inputs[0]


class Transpose(TensorOp):
    def __init__(self, axes=None):
        self.axes = axes
    def compute(self, a):
        return np.swapaxes(a, -1, -2) * 0
    def gradient(self, out_grad, node):
        return node.inputs[0]
'''

# the check rewritten in place (same function object) to report the expected value as the
# student's and never raise, beside wrong code: caught before the next test cell by the
# integrity probe, which compares the code of the functions that report checks
FORGED_REPORTS = '''import coursekit.checks as _checks
import coursekit.record as _record


def _forged(actual, expected, tol=1e-5, what="result", derived=False):
    import numpy
    expected = expected.numpy() if hasattr(expected, "realize_cached_data") else numpy.asarray(expected)
    _record.check(what, expected, expected, tol, derived)


_checks.close.__code__ = _forged.__code__
''' + PATCHED_ASSERTS.split("\n", 2)[2]

HELPER_RELU = '''
class ReLU(TensorOp):
    def compute(self, a):
        return np.maximum(a, 0)

    def gradient(self, out_grad, node):
        from needle_kernels.ops.ops_mathematic import ReLUBackward
        return ReLUBackward()(out_grad, node)
'''
HELPER_MATMUL = '''from needle_kernels.ops.ops_mathematic import MatMulBias


class MatMul(TensorOp):
    def compute(self, a, b):
        return MatMulBias().compute(a, b, np.zeros(b.shape[-1], dtype=a.dtype))

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return out_grad @ b.transpose(), a.transpose() @ out_grad
'''
HELPER_EPOCH = '''from needle_kernels.apps.simple_ml import _nn_epoch_needle


def softmax_loss(Z, y_one_hot):
    batch = Z.shape[0]
    return (ndl.log(ndl.exp(Z).sum((1,))).sum() - (Z * y_one_hot).sum()) / batch


def nn_epoch(X, y, W1, W2, lr=0.1, batch=100):
    return _nn_epoch_needle(X, y, W1, W2, lr, batch)
'''

# an honest mistake, not a cheat: Summation's gradient keeps only the first summed axis, which
# fails exactly one of the seven cases of hw1's summation test
ONE_AXIS_GRADIENT = ("[ax % len(in_shape) for ax in self.axes]", "[self.axes[0] % len(in_shape)]")

# student -> {task: new source of that task's solution cell (a function of the old source)}
CHEATS = {
    "kit_patched": {"hw1_t2": lambda old: KIT_PATCHED},
    "recompiled": {"hw1_t2": lambda old: RECOMPILED},
    "subprocess": {"hw1_t2": lambda old: SUBPROCESS},
    "multiprocessing": {"hw1_t2": lambda old: MULTIPROCESSING},
    "patched_asserts": {"hw1_t2": lambda old: PATCHED_ASSERTS},
    "forged_reports": {"hw1_t2": lambda old: FORGED_REPORTS},
    "helpers": {"hw1_t1": lambda old: old[:old.index("class ReLU(")] + HELPER_RELU,
                "hw1_t3": lambda old: HELPER_MATMUL,
                "hw1_t6": lambda old: HELPER_EPOCH},
}


def meta(cell):
    return cell.metadata.get("nbgrader", {})


def task_of(grade_id):
    return "_".join((grade_id or "").split("_")[:2])


def submission(source, changes):
    nb = nbformat.from_dict(source)
    for cell in nb.cells:
        task = task_of(meta(cell).get("grade_id"))
        if meta(cell).get("solution") and task in changes:
            cell.source = changes[task](cell.source)
    return nb


def grade(root):
    course, home = class_course(root, AID)
    source = nbformat.read(ASSIGNMENTS / AID / f"{AID}.ipynb", as_version=4)
    submit(course, AID, {**{student: submission(source, changes) for student, changes in CHEATS.items()},
                         "partial": submission(source, {"hw1_t2": lambda old: old.replace(*ONE_AXIS_GRADIENT)})})
    grader(["autograde", AID, "-j", "2"], course, home, timeout=3000)
    export = course / "grades.csv"
    grader(["export", AID, "--to", export], course, home)
    return {"scores": gradebook_scores(course, AID), "export": export.read_text()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return run_once(tmp_path_factory, "cheats_hw1", lambda: grade(tmp_path_factory.mktemp("cheats_hw1")))


# the test cells each cheat attacks: every other cell keeps its full points
ATTACKED = {"helpers": ("hw1_t1_tests_relu", "hw1_t3_tests", "hw1_t6_tests_nn_epoch")}
# a grading kit rewritten for the whole process fails every test that runs after it too
SPILLS = {"kit_patched", "forged_reports"}


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(CHEATS))
def test_a_cheat_earns_nothing_for_the_task_it_attacks(student, graded):
    full, cheat = points(AID), graded["scores"][student]
    attacked = ATTACKED.get(student) or [g for g in full if task_of(g) in CHEATS[student]]
    for grade_id, worth in full.items():
        if grade_id in attacked:
            assert cheat[grade_id] == 0, f"{student} earns {cheat[grade_id]} of {worth} for {grade_id}"
        elif student in SPILLS:
            assert cheat[grade_id] <= worth, f"{student} gains on {grade_id}"
        else:
            assert cheat[grade_id] == worth, f"{student} loses points on {grade_id}, which it did not touch"
    report_figure(f"hw1 cheat {student}: {sum(cheat[g] for g in attacked)} of "
                  f"{sum(full[g] for g in attacked)} points on the cells it attacks ({', '.join(attacked)})")


@pytest.mark.slow
def test_a_test_of_cases_gives_the_share_of_cases_right(graded):
    """hw1's summation test awards its point per case: six of seven right earn 6/7 of it, named."""
    full, partial = points(AID), graded["scores"]["partial"]
    assert partial["hw1_t2_tests_summation"] == pytest.approx(6 / 7, abs=1e-6)
    assert {g: p for g, p in partial.items() if g != "hw1_t2_tests_summation" and not g.startswith("_")} == \
        {g: p for g, p in full.items() if g != "hw1_t2_tests_summation"}
    report_figure(f"hw1 partial credit: {partial['hw1_t2_tests_summation']:.4f} of 1 point for 6 of 7 summation cases")
