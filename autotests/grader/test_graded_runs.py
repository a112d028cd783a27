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


def _cased(what, actual, expected, case, error=None):
    record = _record(what, actual, expected)
    record["case"] = case
    if error:
        record = {"task": "t1", "case": case, "what": f"{case}: raised", "error": error}
    return record


# a cell of four independent cases and one check outside them; the last case has no check
# (plain asserts), only the report that it began
PARTIAL = judge.Reference(cells={"t1_b": [_record("setup", [1.0], [1.0])] + [
    _cased(f"shape {k}", [float(k)], [float(k)], f"shape {k}") for k in range(3)] + [
    {"task": "t1", "case": "shape 3", "begins": True}]},
    declaration={"tasks": {"t1": {}}})
BEGUN = {"task": "t1", "case": "shape 3", "begins": True}


def _partial_cell(records, points=3):
    cell = _cell("t1_b", records)
    cell.metadata["nbgrader"]["points"] = points
    return cell


def _checked(values):
    """The setup check and the cases shape 0-2 reporting ``values``."""
    return [_record("setup", [1.0], [1.0])] + [_cased(f"shape {k}", [v], [v], f"shape {k}") for k, v in enumerate(values)]


@pytest.mark.parametrize("records, earned, says", [
    (_checked([0.0, 1.0, 2.0]) + [BEGUN], 3.0, None),
    # one case wrong, one raised: 2 of 4 cases, half the points, both named
    (_checked([0.0, 9.0]) + [_cased("shape 2", None, None, "shape 2", error="NotImplementedError: t1: not implemented yet"),
                             BEGUN], 1.5, "2 of 4 cases pass; failing: shape 1: values differ"),
    # a case whose check was skipped
    (_checked([0.0, 1.0]) + [BEGUN], 2.25, "3 of 4 cases pass; failing: shape 2: this test made 0 of its 1 checks"),
    # the case of plain asserts raised, or was never run
    (_checked([0.0, 1.0, 2.0]) + [BEGUN, _cased("shape 3", None, None, "shape 3", error="AssertionError: shape (3, 2)")],
     2.25, "failing: shape 3: raised: AssertionError: shape (3, 2)"),
    (_checked([0.0, 1.0, 2.0]), 2.25, "failing: shape 3: was not run"),
    # the check outside the cases fails the whole cell
    ([_record("setup", [2.0], [2.0])] + _checked([0.0, 1.0, 2.0])[1:] + [BEGUN], 0.0, "t1: setup: values differ"),
    # a case the instructor's run does not have
    (_checked([0.0, 1.0, 2.0]) + [BEGUN, _cased("shape 4", [4.0], [4.0], "shape 4")], 0.0,
     "a case the instructor's does not have ('shape 4')"),
    # no case passes: a failure, as for any cell
    (_checked([7.0, 7.0, 7.0]), 0.0, "0 of 4 cases pass"),
])
def test_a_cell_of_cases_earns_the_share_of_cases_that_pass(records, earned, says):
    from nbgrader.utils import determine_grade

    nb = nbformat.v4.new_notebook(cells=[_partial_cell(records)])
    outcome = judge.judge(nb, PARTIAL)
    assert outcome == {"t1": earned == 3.0}
    score, most = determine_grade(nb.cells[0])
    assert (score, most) == (earned, 3.0), nb.cells[0].outputs
    text = "".join(o.get("text", "") + o.get("evalue", "") for o in nb.cells[0].outputs)
    assert says is None or says in text, text


def test_only_the_judge_sets_a_test_cells_value():
    """nbgrader reads a test cell's value as partial credit; a value the cell printed is dropped."""
    from nbgrader.utils import determine_grade

    cell = _cell("t1_a", REFERENCE.cells["t1_a"][:2] + [_record("twice", [7.0], [8.0])])
    cell.outputs.insert(0, nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=3))
    nb = nbformat.v4.new_notebook(cells=[cell])
    judge.judge(nb, REFERENCE)
    assert determine_grade(nb.cells[0]) == (0, 1.0)


def test_a_case_reports_its_failure_in_a_graded_run_and_raises_outside(monkeypatch):
    import coursekit.record as record
    from coursekit.checks import case, close

    shown = []
    monkeypatch.setattr(record, "_display", lambda mime, payload: shown.append(payload))
    monkeypatch.delenv(record.RECORD_VARIABLE, raising=False)
    with pytest.raises(AssertionError):
        with case("shape (2, 3)"):
            close([1.0], [2.0], what="sum")
    monkeypatch.setenv(record.RECORD_VARIABLE, "1")
    with case("shape (2, 3)"):
        close([1.0], [2.0], what="sum")
    with case("shape (4,)"):
        raise NotImplementedError("t1: not implemented yet")
    close([1.0], [1.0], what="after")
    # the failing check is reported, then the assertion it raised; the cell goes on
    assert [(p["case"], p.get("what", "begins")) for p in shown] == [
        ("shape (2, 3)", "begins"), ("shape (2, 3)", "sum"), ("shape (2, 3)", "shape (2, 3): raised"),
        ("shape (4,)", "begins"), ("shape (4,)", "shape (4,): raised"), (None, "after")]
    assert shown[2]["error"].startswith("AssertionError: ") and "sum" in shown[2]["error"]
    assert shown[4]["error"] == "NotImplementedError: t1: not implemented yet"
