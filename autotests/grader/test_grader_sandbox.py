"""The sandboxed execution on its own: limits stop a notebook, earlier cells keep their
results, and later cells score 0 with the reason in their output."""

import sys

import nbformat
import pytest

from grader_testkit import REPO, require_bwrap
from simulated_class import SWALLOW_ERRORS

sys.path.insert(0, str(REPO))
from grader.sandbox.run import STOP_NAME, RunSettings, merge_outputs, run_notebook  # noqa: E402

pytestmark = pytest.mark.slow


def settings(**overrides):
    base = dict(mode="bwrap", kernel_name="python3", cell_timeout=5, budget=60, startup_timeout=60,
                extra_arguments=["--HistoryManager.hist_file=:memory:"],
                limits={"memory_bytes": 1 << 30, "max_processes": 32, "max_file_bytes": 1 << 20,
                        "max_open_files": 256, "cpu_seconds": 60},
                uid_base=61000, tmp_mb=64)
    base.update(overrides)
    return RunSettings(**base)


def notebook(*sources):
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def errors(cell):
    return [o.get("ename") for o in cell.outputs if o.output_type == "error"]


def test_kernel_death_stops_the_rest_with_a_reason(tmp_path):
    require_bwrap()
    nb = notebook("x = 1", "import os; os.kill(os.getpid(), 9)", "print(x)")
    result = run_notebook(nb, tmp_path, settings())
    assert errors(result.nb.cells[0]) == []
    assert errors(result.nb.cells[1]) == [STOP_NAME] and errors(result.nb.cells[2]) == [STOP_NAME]
    assert "kernel died" in result.reasons[0]


def test_budget_bounds_the_whole_notebook(tmp_path):
    require_bwrap()
    nb = notebook("import time; time.sleep(2)", "time.sleep(6)", "time.sleep(6)", "print('late')")
    result = run_notebook(nb, tmp_path, settings(budget=6, cell_timeout=30))
    assert errors(result.nb.cells[0]) == []
    assert STOP_NAME in errors(result.nb.cells[-1])
    assert "time budget of 6 s" in result.reasons[0]


def test_file_size_and_processes_are_limited(tmp_path):
    require_bwrap()
    nb = notebook("open('big', 'wb').write(b'x' * (2 << 20))",
                  "import os\npids = []\ntry:\n    while True:\n        pid = os.fork()\n"
                  "        if pid == 0:\n            import time; time.sleep(60)\n        pids.append(pid)\n"
                  "except OSError as err:\n    print('stopped after', len(pids))")
    result = run_notebook(nb, tmp_path, settings())
    assert "OSError" in errors(result.nb.cells[0])  # EFBIG: Python ignores SIGXFSZ
    text = "".join(o.get("text", "") for o in result.nb.cells[1].outputs)
    assert "stopped after" in text and int(text.split()[-1]) < 32


def test_worker_output_cannot_rewrite_sources():
    trusted = notebook("assert False")
    forged = notebook("pass")
    status = {"completed": 1, "running": None, "reason": None}
    merged, reasons = merge_outputs(trusted, forged, status)
    assert merged.cells[0].source == "assert False" and reasons == []
    shorter = nbformat.v4.new_notebook()
    merged, reasons = merge_outputs(trusted, shorter, status)
    assert errors(merged.cells[0]) == [STOP_NAME]


def test_unshare_fallback_hides_the_course_and_the_network(tmp_path):
    from grader.sandbox.confinement import probe

    ok, detail = probe("unshare")
    if not ok:
        pytest.skip(f"unshare cannot sandbox here: {detail}")
    secret = tmp_path / "course"
    secret.mkdir()
    (secret / "gradebook.db").write_text("grades")
    work = tmp_path / "work"
    work.mkdir()
    nb = notebook(f"import os\nprint(os.path.exists({str(secret / 'gradebook.db')!r}))",
                  "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)",
                  f"open({str(secret / 'x')!r}, 'w')")
    result = run_notebook(nb, work, settings(mode="unshare", hidden=[str(secret)]))
    assert "False" in result.nb.cells[0].outputs[0]["text"]
    assert errors(result.nb.cells[1]) == ["OSError"]
    assert not (secret / "x").exists()


def graded(nb, *indices):
    """Mark cells as nbgrader autograded test cells (grade, not solution)."""
    for i in indices:
        nb.cells[i].metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                            "grade_id": f"test{i}", "points": 1, "schema_version": 3}
    return nb


@pytest.mark.parametrize("tamper", [
    SWALLOW_ERRORS,
    "import numpy.testing\nnumpy.testing.assert_allclose = lambda *a, **k: None\ndef mean(xs): return 0",
    "get_ipython().set_custom_exc((AssertionError,), lambda *a, **k: None)\ndef mean(xs): return 0",
], ids=["ast-transformer", "patched-assert", "custom-exception-handler"])
def test_tampering_with_how_tests_run_stops_the_notebook(tmp_path, tamper):
    require_bwrap()
    nb = graded(notebook("x = 1", tamper,
                         "import numpy.testing\nnumpy.testing.assert_allclose(mean([1, 2, 3]), 2)\n"
                         "assert mean([2, 4]) == 3"), 2)
    result = run_notebook(nb, tmp_path, settings(cell_timeout=30))
    assert errors(result.nb.cells[2]) == [STOP_NAME]
    assert "changed how its tests run" in result.reasons[0]


def test_an_honest_notebook_passes_the_integrity_checks(tmp_path):
    require_bwrap()
    nb = graded(notebook("import numpy as np\n%matplotlib inline\ndef mean(xs): return float(np.mean(xs))",
                         "assert mean([2, 4]) == 3", "np.testing.assert_allclose(mean([1, 2]), 1.5)"), 1, 2)
    result = run_notebook(nb, tmp_path, settings(cell_timeout=30))
    assert result.reasons == [] and [errors(c) for c in result.nb.cells] == [[], [], []]
