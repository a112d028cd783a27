"""Execute one notebook inside the sandbox, the way nbgrader's Execute preprocessor does.

nbgrader's `Execute` is nbclient's `NotebookClient` with four settings and one hook;
they are repeated here on nbclient directly because importing nbgrader (its
gradebook, SQLAlchemy, nbconvert) would add seconds to every sandbox start.

Usage: python worker.py JOB_DIR

JOB_DIR holds `job.json` (kernel name, limits, timeouts), `in.ipynb` and `work/`
(a copy of the submission, the kernel's working directory). After every cell the
worker rewrites `out.ipynb` and `status.json`, so whatever stops it, a kill by the
wall-clock budget included, the cells that did complete keep their results.
"""

import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

# run as `python -I worker.py`: -I leaves this folder off sys.path, the probe lives here
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# nbformat imports jsonschema, which would compile rfc3987_syntax's grammar (a second of every
# sandbox start) for formats no notebook schema uses (see grader/__init__.py)
sys.modules.setdefault("rfc3987_syntax", None)
import integrity  # noqa: E402
from atomic import write_atomic  # noqa: E402


def install_kernelspec(spec: dict, code_dir: str) -> None:
    """Define the pinned kernel name as: this interpreter, started through the limits launcher."""
    root = Path("/tmp/grader-kernelspecs")
    kdir = root / "kernels" / spec["kernel_name"]
    kdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-I", os.path.join(code_dir, "kernel_launcher.py"),
            json.dumps(spec["limits"]), "-f", "{connection_file}"]
    (kdir / "kernel.json").write_text(json.dumps(
        {"argv": argv, "display_name": spec["kernel_name"], "language": "python"}))
    os.environ["JUPYTER_PATH"] = str(root)
    os.environ["JUPYTER_RUNTIME_DIR"] = "/tmp/grader-runtime"
    os.environ["JUPYTER_CONFIG_DIR"] = "/tmp/grader-config"
    os.environ["JUPYTER_DATA_DIR"] = "/tmp/grader-data"
    os.environ["IPYTHONDIR"] = "/tmp/grader-ipython"


def take_caches(job: Path):
    """Where the kernel keeps what it compiles, seeded from the job's ``carry`` folder: a private
    folder in the sandbox's /tmp (the job folder may lie on a file system that forbids loading
    code from it). None when the job carries nothing."""
    if not (job / "carry").is_dir():
        return None
    caches = Path(tempfile.mkdtemp(prefix="grader-carry-"))
    try:
        shutil.copytree(job / "carry", caches, dirs_exist_ok=True)
    except OSError:  # a full /tmp: this run compiles again rather than not running
        shutil.rmtree(caches, ignore_errors=True)
        caches.mkdir()
    # IPython's %%cython keeps its modules under XDG_CACHE_HOME/ipython/cython
    (caches / "cache").mkdir(exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = str(caches / "cache")
    os.environ["CUPY_HOST_BUILD_DIR"] = str(caches / "cupy_host")
    return caches


def _special_files(folder, names):
    """Pipes, sockets and devices, which a copy would block on or refuse."""
    return {name for name in names
            if not stat.S_ISREG(mode := os.lstat(os.path.join(folder, name)).st_mode)
            and not stat.S_ISDIR(mode) and not stat.S_ISLNK(mode)}


def give_back_caches(caches, job: Path):
    """The compiled modules back into the job folder, for the next run of this submission."""
    if caches is None:
        return
    shutil.rmtree(job / "carry", ignore_errors=True)
    try:
        shutil.copytree(caches, job / "carry", symlinks=True, ignore=_special_files)
    except OSError:  # a full disk costs the next run a compile, not this run's results
        shutil.rmtree(job / "carry", ignore_errors=True)


def is_test_cell(cell) -> bool:
    """An autograded test cell: graded, not a solution (nbgrader's cell metadata)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def main() -> int:
    job = Path(sys.argv[1])
    spec = json.loads((job / "job.json").read_text())
    install_kernelspec(spec, os.path.dirname(os.path.abspath(__file__)))
    caches = take_caches(job)

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError
    from nbformat import NotebookNode

    class Execute(NotebookClient):
        """nbgrader.preprocessors.Execute: errors never stop the run, timeouts interrupt."""

        def on_cell_executed(self, **kwargs):
            cell, reply = kwargs["cell"], kwargs["execute_reply"]
            content = reply["content"]
            if content["status"] == "error" and not any(
                    out.output_type == "error" and out.ename == content["ename"] for out in cell.outputs):
                cell.outputs.append(NotebookNode(
                    output_type="error", ename=content["ename"], evalue=content["evalue"],
                    traceback=content["traceback"] or ["ERROR: An error occurred while showtraceback "
                                                       "was disabled"]))

    nb = nbformat.read(str(job / "in.ipynb"), as_version=nbformat.NO_CONVERT)
    workdir = str(job / "work")
    status = {"completed": 0, "running": None, "reason": None}

    def save():
        write_atomic(job / "out.ipynb", nbformat.writes(nb))
        write_atomic(job / "status.json", json.dumps(status))

    def probe(index):
        """Run the integrity probe as an extra cell; its report, or None (see integrity.py)."""
        nonce = secrets.token_hex(16)
        cell = nbformat.v4.new_code_cell(integrity.probe_source(nonce))
        # nbclient stores the executed cell at nb.cells[index]: give it a place of its own there
        nb.cells.insert(index, cell)
        try:
            ep.execute_cell(cell, index, store_history=False)
        finally:
            del nb.cells[index]
        return integrity.read_report(cell.outputs, nonce)

    resources = {"metadata": {"path": workdir}}
    ep = Execute(nb, timeout=spec["cell_timeout"], kernel_name=spec["kernel_name"],
                 startup_timeout=spec["startup_timeout"], extra_arguments=spec["extra_arguments"],
                 interrupt_on_timeout=True, allow_errors=True, raise_on_iopub_timeout=True,
                 error_on_timeout={"ename": "CellTimeoutError", "evalue": "",
                                   "traceback": ["\x1b[0;31mCellTimeoutError\x1b[0m: No reply from "
                                                 f"kernel before timeout ({spec['cell_timeout']} s)"]},
                 # the outputs are in once the last cell replies; a graceful shutdown would only wait
                 # for the kernel to wind down in a sandbox that is thrown away next
                 shutdown_kernel="immediate", resources=resources)
    save()
    try:
        with ep.setup_kernel(cwd=workdir):
            info = ep.wait_for_reply(ep.kc.kernel_info())
            nb.metadata["language_info"] = info["content"]["language_info"]
            # the budget counts from a running kernel; starting one has its own timeout
            deadline = time.monotonic() + spec["budget"]
            graded = any(is_test_cell(c) for c in nb.cells)
            baseline = probe(0) if graded else None
            # fail closed: without a clean baseline no later check could be trusted
            status["reason"] = integrity.baseline_problem(baseline) if graded else None
            for index, cell in enumerate(nb.cells if status["reason"] is None else []):
                remaining = deadline - time.monotonic()
                if remaining <= 1:
                    status["reason"] = f"the notebook's time budget of {spec['budget']} s ran out"
                    break
                ep.timeout = max(1, int(min(spec["cell_timeout"], remaining)))
                if baseline is not None and is_test_cell(cell):
                    problems = integrity.tampering(baseline, probe(index))
                    if problems:
                        status["reason"] = ("the notebook changed how its tests run: "
                                            + "; ".join(problems[:3]))
                        break
                status["running"] = index
                ep.execute_cell(cell, index, store_history=True)
                status["completed"], status["running"] = index + 1, None
                save()
    except DeadKernelError:
        status["reason"] = (
            "the kernel died (a crash, os._exit, or a resource limit: "
            f"{spec['limits']['memory_bytes'] >> 20} MiB of memory, "
            f"{spec['limits']['max_processes']} processes)")
    except Exception as err:  # noqa: BLE001 - any failure of the run is reported, not raised
        status["reason"] = f"execution stopped: {type(err).__name__}: {str(err)[:300]}"
    save()
    give_back_caches(caches, job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
