"""Prove an assignment before students see it: the solution earns every autograded
point and the released version does not (Otter's habit, on nbgrader's notebooks).

Both run in the same sandbox as submissions, so a test that only passes on the
instructor's machine is caught here rather than in the class's grades.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import nbformat

from grader.sandbox.execute import run_settings
from grader.sandbox.run import execution_key, run_notebook
from grader.state import ExecutionCache, record_execution


@dataclass
class Proof:
    notebook: str
    tests: int
    solution_failures: list     # grade ids of tests the solution fails
    release_passes: list        # grade ids of tests the released version already passes


def _failed_tests(nb) -> tuple:
    failed, passed = [], []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            errored = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
            (failed if errored else passed).append(meta.get("grade_id"))
    return failed, passed


def prove(course, assignment, log=None) -> list:
    settings = run_settings(course.config, course.root)
    jobs = []
    for source in sorted(course.path("source", assignment).glob("*.ipynb")):
        release = course.path("release", assignment, source.name)
        jobs.append((source, release))

    def run(path):
        # recorded like any execution: an unchanged notebook is not run again next time
        nb = nbformat.read(str(path), as_version=4)
        key = execution_key(nb, path.parent, settings)
        hit = ExecutionCache(course.root).get(key)
        if hit is not None:
            return hit[0]
        result = run_notebook(nb, path.parent, settings, log=log)
        record_execution(course.root, key, result)
        return result.nb

    proofs = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for source, release in jobs:
            solved, stub = pool.map(run, [source, release])
            failed, passed = _failed_tests(solved)
            _, stub_passes = _failed_tests(stub)
            proofs.append(Proof(source.stem, len(failed) + len(passed), failed, stub_passes))
    return proofs
