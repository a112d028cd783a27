"""The sandboxed execution on its own: limits stop a notebook, earlier cells keep their
results, and later cells score 0 with the reason in their output."""

import os
import subprocess
import sys

import nbformat
import pytest

from autotests.elf import assert_built_without_debug_information
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


def outputs(cell):
    return "".join(o.get("text", "") for o in cell.outputs)


def test_a_carried_cache_brings_a_compiled_cell_to_the_next_run_and_nothing_else_back(tmp_path):
    """What one run of a submission compiles is there for its next run; the host reads back
    regular files only, so a link the notebook made never names a host file to copy."""
    require_bwrap()
    secret = tmp_path / "secret"
    secret.write_text("the grader's own file")
    work, carry = tmp_path / "work", tmp_path / "carry"
    work.mkdir()
    # compiled with Python's own optimisation (and NDEBUG), or the cell does not compile
    cell = ('%%cython\ncdef extern from *:\n    """\n    #if !defined(__OPTIMIZE__) || !defined(NDEBUG)\n'
            '    #error not compiled with Python\'s own flags\n    #endif\n    """\n'
            "def triple(int x):\n    return 3 * x")
    built = ("import glob, os\nprint(sorted(os.path.basename(p) for p in glob.glob("
             "os.environ['XDG_CACHE_HOME'] + '/ipython/cython/*.so')))")
    # a compiler writes files of several MiB
    compiling = settings(cell_timeout=120, limits={**settings().limits, "max_file_bytes": 64 << 20})
    first = notebook("%load_ext Cython", cell, "print(triple(14))", built,
                     f"import os\nhome = os.environ['XDG_CACHE_HOME']\nos.symlink({str(secret)!r}, home + '/link')\n"
                     "os.mkfifo(home + '/fifo')\nprint(os.environ['CUPY_HOST_BUILD_DIR'])")
    result = run_notebook(first, work, compiling, carry=carry)
    assert result.reasons == [] and outputs(result.nb.cells[2]) == "42\n"
    modules = outputs(result.nb.cells[3])
    assert ".so" in modules
    kept = sorted(p.relative_to(carry).as_posix() for p in carry.rglob("*") if p.is_file() or p.is_symlink())
    assert not any(name.endswith(("link", "fifo")) for name in kept)
    assert any(name.startswith("cache/ipython/cython/") and name.endswith(".so") for name in kept)
    # compiled without debug information, which no graded run reads
    for name in kept:
        if name.endswith(".so"):
            assert_built_without_debug_information(carry / name)

    # the next run finds the module before its cell runs, and the cell loads it
    second = notebook(built, "%load_ext Cython", cell, "print(triple(5))")
    again = run_notebook(second, work, compiling, carry=carry)
    assert outputs(again.nb.cells[0]) == modules and outputs(again.nb.cells[3]) == "15\n"

    # a run without a carried folder starts bare, as every run did before
    bare = run_notebook(notebook("import os\nprint(os.environ.get('XDG_CACHE_HOME'))"), work, settings())
    assert outputs(bare.nb.cells[0]) == "None\n"


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


@pytest.mark.parametrize("startup, reason", [
    ("import sys, io; sys.stdout = io.StringIO()", "did not answer the integrity check"),
    ("import ast; get_ipython().ast_transformers.append(ast.NodeTransformer())", "was altered"),
], ids=["silent-kernel", "altered-kernel"])
def test_a_broken_grading_kernel_grades_nothing(tmp_path, startup, reason):
    # lines the kernel runs at start-up, before the baseline probe: a broken environment,
    # not a submission, so the checks cannot be trusted and nothing is graded
    require_bwrap()
    nb = graded(notebook("def mean(xs): return sum(xs) / len(xs)", "assert mean([2, 4]) == 3"), 1)
    broken = settings(cell_timeout=30).extra_arguments + [f"--IPKernelApp.exec_lines={[startup]!r}"]
    result = run_notebook(nb, tmp_path, settings(cell_timeout=30, extra_arguments=broken))
    assert [errors(c) for c in result.nb.cells] == [[STOP_NAME], [STOP_NAME]]
    assert reason in result.reasons[0] and "nothing was graded" in result.reasons[0]


def test_the_process_limit_scope_is_measured_right(tmp_path):
    """process_count's answer agrees with what an ordinary user's namespace can fork.

    Ten processes of the user run outside; inside a fresh user namespace under a limit of
    8, a per-namespace count lets about 7 forks through, a per-uid count none.
    """
    import shutil

    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare") or not python:
        pytest.skip("needs root (to act as another user), setpriv, unshare and a system python3")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    code = REPO / "grader" / "sandbox" / "process_count.py"
    fork_until_refused = (
        "import os, resource, time\nresource.setrlimit(resource.RLIMIT_NPROC, (8, 8))\nn = 0\n"
        "try:\n    while n < 50:\n        if os.fork() == 0:\n            time.sleep(3); os._exit(0)\n"
        "        n += 1\nexcept OSError:\n    pass\nprint(n)")
    sleepers = [subprocess.Popen([*as_nobody, "sleep", "30"]) for _ in range(10)]
    try:
        forks = int(subprocess.run([*as_nobody, "unshare", "--user", python, "-I", "-c", fork_until_refused],
                                   capture_output=True, text=True, timeout=60, check=True).stdout)
        answer = subprocess.run([*as_nobody, python, "-I", str(code)], capture_output=True, text=True,
                                timeout=60, check=True).stdout.strip()
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
    assert answer == ("per-namespace" if forks >= 5 else "per-uid"), (forks, answer)
    assert forks in (0, 7), forks  # 8 minus the forking process itself, or nothing at all
