"""Execute one notebook inside the sandbox with nbgrader's Execute preprocessor.

Usage: python worker.py JOB_DIR

JOB_DIR holds `job.json` (kernel name, limits, timeouts), `in.ipynb` and `work/`
(a copy of the submission, the kernel's working directory). After every cell the
worker rewrites `out.ipynb` and `status.json`, so whatever stops it, a kill by the
wall-clock budget included, the cells that did complete keep their results.
"""

import json
import os
import sys
import time
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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


def main() -> int:
    job = Path(sys.argv[1])
    spec = json.loads((job / "job.json").read_text())
    install_kernelspec(spec, os.path.dirname(os.path.abspath(__file__)))

    import nbformat
    from nbclient.exceptions import DeadKernelError
    from nbgrader.preprocessors import Execute

    nb = nbformat.read(str(job / "in.ipynb"), as_version=nbformat.NO_CONVERT)
    workdir = str(job / "work")
    status = {"completed": 0, "running": None, "reason": None}
    deadline = time.monotonic() + spec["budget"]

    def save():
        write_atomic(job / "out.ipynb", nbformat.writes(nb))
        write_atomic(job / "status.json", json.dumps(status))

    ep = Execute(timeout=spec["cell_timeout"], kernel_name=spec["kernel_name"],
                 startup_timeout=spec["startup_timeout"], extra_arguments=spec["extra_arguments"])
    ep.nb = nb
    resources = {"metadata": {"path": workdir}}
    ep.reset_execution_trackers()
    ep._check_assign_resources(resources)
    save()
    try:
        with ep.setup_kernel(cwd=workdir):
            info = ep.wait_for_reply(ep.kc.kernel_info())
            nb.metadata["language_info"] = info["content"]["language_info"]
            for index, cell in enumerate(nb.cells):
                remaining = deadline - time.monotonic()
                if remaining <= 1:
                    status["reason"] = f"the notebook's time budget of {spec['budget']} s ran out"
                    break
                ep.timeout = max(1, int(min(spec["cell_timeout"], remaining)))
                status["running"] = index
                ep.preprocess_cell(cell, resources, index)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
