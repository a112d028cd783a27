"""Whether a test cell passed, decided here, after the notebook ran, not in its process.

A graded notebook's test cells run in the same process as the student's code, which can
replace any check there. So the checks only report what they compared (see
``coursekit.record``: the case, the value produced, the value it was compared with, the
tolerance), and the grader judges each reported case against the same case of the
instructor's solution, run in a sandbox of its own (``grader.graded_run.reference``):

* the cell must report the cases the reference run reported, in the same order: a check
  that was skipped, patched into silence or duplicated fails the cell;
* the student's value must match the value the reference run compared with, within the
  tolerance that run used, whatever the submission's process compared it with (a patched
  ``numpy.exp`` changes the expected value in the submission's process, not here);
* only a check the reference run reported as *derived* (``close(..., derived=True)``: the
  value compared with is made in the same run from objects the student's code takes part
  in, such as a model of the library's modules beside theirs, or the first of two calls)
  is compared here with the value the submission's run reported. The reference decides
  which checks those are, so a submission cannot make a check derived.

A cell that fails here gets an error output naming its task and case, exactly as a failing
check would have raised it, so nbgrader scores it 0 and the student's feedback says why. A cell
whose checks the instructor's run made in cases (``coursekit.checks.case``) earns its points per
case: the share of the reference's cases that pass, written as the cell's value (nbgrader's
partial credit) beside a line naming the failing cases; none passing is a failure as above.
The reports themselves are removed from the notebook.
"""

import base64
from dataclasses import dataclass, field

import nbformat
import numpy as np

from grader.sandbox.worker import is_test_cell

CHECK_TYPE = "application/vnd.coursekit.check+json"
DECLARATION_TYPE = "application/vnd.coursekit.declaration+json"
ERROR_NAME = "AssertionError"


@dataclass
class Reference:
    """The instructor's run of a notebook: the checks each test cell reported, and the
    withheld parts the notebook declared."""

    cells: dict = field(default_factory=dict)     # grade_id -> [check record]
    declaration: dict = None
    digest: str = ""

    def to_json(self) -> dict:
        return {"cells": self.cells, "declaration": self.declaration, "digest": self.digest}

    @classmethod
    def from_json(cls, data):
        return cls(cells=data["cells"], declaration=data.get("declaration"), digest=data.get("digest", ""))


def _records(cell, mime):
    return [out["data"][mime] for out in cell.get("outputs", [])
            if out.get("output_type") == "display_data" and mime in out.get("data", {})]


def checks(cell) -> list:
    return _records(cell, CHECK_TYPE)


def declaration(nb):
    """The withheld parts a notebook's run reported (None when it declared none)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            found = _records(cell, DECLARATION_TYPE)
            if found:
                return found[0]
    return None


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def task_of(cell, declared_tasks) -> str:
    """The task a test cell belongs to: the declared task its grade id starts with."""
    gid = grade_id(cell) or ""
    for task in sorted(declared_tasks, key=len, reverse=True):
        if gid == task or gid.startswith(task + "_"):
            return task
    return None


def has_error(cell) -> bool:
    return any(out.get("output_type") == "error" for out in cell.get("outputs", []))


def _decode(value):
    """The array a check reported (the wire format of ``coursekit.record.encode``)."""
    if not isinstance(value, dict) or "data" not in value:
        return None
    dtype = {"int64": np.int64, "float64": np.float64}.get(value.get("dtype"))
    try:
        return np.frombuffer(base64.b64decode(value["data"]), dtype=dtype).reshape(value["shape"])
    except (TypeError, ValueError):
        return None


def _close(a, b, tol) -> bool:
    if a is None or b is None or a.shape != b.shape:
        return False
    return bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))


def _gap(a, b) -> str:
    if a is None:
        return "no value was reported"
    if b is None or a.shape != b.shape:
        return f"shape {tuple(a.shape)}, expected {tuple(b.shape) if b is not None else '?'}"
    with np.errstate(invalid="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    worst = np.nanmax(diff) if diff.size and not np.all(np.isnan(diff)) else float("nan")
    return f"values differ from the expected ones by up to {worst:.3g}"


def verdict(cell, reference_records, task=None):
    """None when the cell passes, else the message of its failure."""
    return _compare(checks(cell), reference_records, f"{task}: " if task else "")


def _compare(reported, reference_records, label):
    """None when the reported checks match the reference's, else why not.

    A case that raised (``coursekit.checks.case``) is named by its error's first line when it
    stopped before its checks were done; otherwise by the checks, whose messages show no value.
    """
    errors = [r for r in reported if "error" in r]
    reported = [r for r in reported if "error" not in r]
    if errors and (len(reported) < len(reference_records) or not _compare(reported, reference_records, label)):
        first = next((line for line in str(errors[0]["error"]).splitlines() if line.strip(" :")), "")
        return f"{label}{errors[0].get('what')}: {first.strip()}"
    if len(reported) != len(reference_records):
        return (f"{label}this test made {len(reported)} of its {len(reference_records)} checks "
                "(a check was skipped, silenced or added while it ran)")
    for mine, ref in zip(reported, reference_records):
        what = ref.get("what", "result")
        if mine.get("what") != what:
            return f"{label}a check ran as {mine.get('what')!r} where {what!r} was expected"
        tol = float(ref.get("tol", 1e-5))
        actual = _decode(mine.get("actual"))
        expected = _decode(mine.get("expected"))
        ref_expected = _decode(ref.get("expected"))
        against = expected if ref.get("derived") else ref_expected
        if not _close(actual, against, tol):
            return f"{label}{what}: {_gap(actual, against)}"
    return None


def cases(reference_records) -> list:
    """The case labels of a test cell that awards its points per case (``coursekit.checks.case``),
    in order; empty for a cell that passes or fails as a whole."""
    return list(dict.fromkeys(r["case"] for r in reference_records if r.get("case")))


def partial_verdict(cell, reference_records, task=None):
    """(message, share of the cell's points earned) of a cell scored per case.

    The checks made outside any case must all pass; each of the reference's cases passes when
    the submission made the same checks in it and they pass (a case that raised, or was skipped,
    fails). A case the reference does not have fails the cell.
    """
    label = f"{task}: " if task else ""
    labels = cases(reference_records)
    reported = [r for r in checks(cell) if not r.get("begins")]
    extra = sorted({r.get("case") for r in checks(cell) if r.get("case")} - set(labels))
    started = {r.get("case") for r in reference_records if r.get("begins")}
    reference_records = [r for r in reference_records if not r.get("begins")]
    if extra:
        return f"{label}the test ran a case the instructor's does not have ({extra[0]!r})", 0.0
    outside = _compare([r for r in reported if not r.get("case")],
                       [r for r in reference_records if not r.get("case")], label)
    if outside:
        return outside, 0.0
    begun = {r.get("case") for r in checks(cell) if r.get("begins")}
    failing = []
    for name in labels:
        if name in started and name not in begun:
            failing.append(f"{name}: was not run")
            continue
        problem = _compare([r for r in reported if r.get("case") == name],
                           [r for r in reference_records if r.get("case") == name], "")
        if problem:
            failing.append(problem if problem.startswith(name) else f"{name}: {problem}")
    if not failing:
        return None, 1.0
    passed = len(labels) - len(failing)
    return (f"{label}{passed} of {len(labels)} cases pass; failing: " + "; ".join(failing[:5])
            + (f"; and {len(failing) - 5} more" if len(failing) > 5 else "")), passed / len(labels)


def failure_output(message):
    return nbformat.v4.new_output("error", ename=ERROR_NAME, evalue=message,
                                  traceback=[f"{ERROR_NAME}: {message}"])


def judge(nb, reference: Reference, cells=None) -> dict:
    """Mark the test cells of ``nb`` (those at ``cells``, else all) from the verdicts here.

    Returns {task or None: passed} over the judged cells. Every report is removed.
    """
    declared = list((reference.declaration or {}).get("tasks", {}))
    outcome = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if is_test_cell(cell) and (cells is None or index in cells):
            task = task_of(cell, declared)
            # nbgrader reads a test cell's value as its partial score: only the judge may set one
            cell.outputs = [out for out in cell.get("outputs", []) if out.get("output_type") != "execute_result"]
            share = 0.0
            if not has_error(cell):
                refs = reference.cells.get(grade_id(cell), [])
                if cases(refs):
                    message, share = partial_verdict(cell, refs, task)
                else:
                    message = verdict(cell, refs, task)
                    share = 0.0 if message else 1.0
                if message and share:
                    points = float(cell.metadata.get("nbgrader", {}).get("points", 0))
                    cell.outputs[:0] = [nbformat.v4.new_output("stream", name="stdout", text=message + "\n"),
                                        nbformat.v4.new_output("execute_result", data={
                                            "text/plain": f"{round(points * share, 6):g}"}, execution_count=None)]
                elif message:
                    cell.outputs.append(failure_output(message))
            outcome[task] = outcome.get(task, True) and not has_error(cell) and share == 1.0
        cell.outputs = [out for out in cell.get("outputs", []) if not (
            out.get("output_type") == "display_data"
            and (CHECK_TYPE in out.get("data", {}) or DECLARATION_TYPE in out.get("data", {})))]
    return outcome
