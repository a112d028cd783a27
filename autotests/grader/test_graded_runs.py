"""The two halves of a graded run, alone: the package built without parts, and the judge.

(``autotests/course/test_cheats.py`` and ``test_own_work.py`` grade whole classes with them.)
"""
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "course"))

from coursekit.record import CHECK_TYPE, encode  # noqa: E402
from grader import judge  # noqa: E402
from grader.package_build import Removal, build, check_imports  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    dest = tmp_path_factory.mktemp("build")
    summary = build(Removal("needle_kernels", {"ops.Summation": "t2", "ops.relu_backward": "t1",
                                               "apps.simple_ml.nn_epoch": "t6"}, keep=frozenset({"add_n"})), dest)
    return dest, summary


def in_build(dest, code):
    prelude = ("import sys\n"
               "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]\n"
               f"sys.path.insert(0, {str(dest)!r})\n")
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_build_imports_and_names_what_it_took_out(built):
    dest, summary = built
    assert check_imports(dest, "needle_kernels", ["nn", "apps.simple_ml", "apps.models"]) == ""
    assert "ops/ops_mathematic.py:Summation" in summary["definitions"]
    # the helpers only removed code used: the ReLU adjoint's op class, the epoch's loop
    assert "ops/ops_mathematic.py:ReLUBackward" in summary["helpers"]
    assert "apps/simple_ml.py:_nn_epoch_needle" in summary["helpers"]
    assert not any(name.endswith(":add_n") for name in summary["helpers"]), "a kept name stays"
    assert not list((dest / "needle_kernels").rglob("*.pyx")), "no Cython sources in a build"


def test_removed_code_raises_naming_the_task_and_leaves_no_source(built):
    dest, _ = built
    code, out = in_build(dest, "import inspect, numpy as np\n"
                               "import needle_kernels.ops.ops_mathematic as m\n"
                               "assert 'reduce' not in inspect.getsource(m.Summation), inspect.getsource(m.Summation)\n"
                               "print(m.Negate().compute(np.ones(2)))\n"
                               "m.Summation((0,)).compute(np.ones(2))\n")
    assert code != 0 and "[-1. -1.]" in out, out
    assert "NotImplementedError: t2: needle_kernels.ops.ops_mathematic.Summation is not in the package" in out, out


def _cell(grade_id, records, error=False):
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": 1}
    cell.outputs = [nbformat.v4.new_output("display_data", data={CHECK_TYPE: r}) for r in records]
    if error:
        cell.outputs.append(judge.failure_output("raised in the notebook"))
    return cell


def _record(what, actual, expected, tol=1e-5, derived=False):
    return {"task": "t1", "what": what, "tol": tol, "derived": derived,
            "actual": encode(np.asarray(actual, dtype=float)), "expected": encode(np.asarray(expected, dtype=float))}


# "twice": the second of two calls compared with the first, so its expected value is the run's own
REFERENCE = judge.Reference(cells={"t1_a": [_record("sum", [3.0], [3.0]), _record("grad", [1, 1], [1, 1]),
                                            _record("twice", [2.0], [2.0], derived=True)]},
                            declaration={"tasks": {"t1": {}}})


TWICE = _record("twice", [7.0], [7.0], derived=True)


@pytest.mark.parametrize("records, passes, says", [
    ([_record("sum", [3.0], [3.0]), _record("grad", [1, 1], [1, 1]), TWICE], True, None),
    # wrong values, whatever the notebook's process concluded about them
    ([_record("sum", [4.0], [3.0]), _record("grad", [1, 1], [1, 1]), TWICE], False, "t1: sum: values differ"),
    # a wrong value reported as its own expectation (a patched numpy in the submission's process)
    ([_record("sum", [5.0], [5.0]), _record("grad", [1, 1], [1, 1]), TWICE], False, "t1: sum: values differ"),
    # ...the same on a check the submission calls derived, where the reference's is not
    ([_record("sum", [5.0], [5.0], derived=True), _record("grad", [1, 1], [1, 1]), TWICE], False, "t1: sum"),
    # a check the reference made derived: compared with the value the run itself reported
    ([_record("sum", [3.0], [3.0]), _record("grad", [1, 1], [1, 1]), _record("twice", [7.0], [8.0])], False,
     "t1: twice: values differ"),
    # a check silenced
    ([_record("sum", [3.0], [3.0]), TWICE], False, "made 2 of its 3 checks"),
    ([_record("sum", [3.0], [3.0]), _record("grad", [1, 1, 1], [1, 1]), TWICE], False, "shape (3,)"),
])
def test_the_judge_decides_from_the_reported_values(records, passes, says):
    nb = nbformat.v4.new_notebook(cells=[_cell("t1_a", records)])
    outcome = judge.judge(nb, REFERENCE)
    assert outcome == {"t1": passes}
    errors = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert bool(errors) != passes and (says is None or says in errors[0].evalue), errors
    assert not any(CHECK_TYPE in o.get("data", {}) for o in nb.cells[0].outputs), "reports are removed"


def test_a_cell_that_raised_stays_failed():
    nb = nbformat.v4.new_notebook(cells=[_cell("t1_a", REFERENCE.cells["t1_a"], error=True)])
    assert judge.judge(nb, REFERENCE) == {"t1": False}
