"""Run one notebook in a fresh sandbox, from the host, and bring back a trustworthy result.

The worker inside the sandbox shares it with the student's code, so what it writes is
only used for cell outputs: they are copied onto the notebook that went in (whose
sources and metadata nbgrader already restored), never the other way round.
"""

import copy
import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader.sandbox import process_count
from grader.sandbox.confinement import Confinement, choose, interpreter_paths, package_dirs

STOP_NAME = "SandboxStopped"
# per account: a folder one account made in the shared /tmp would shut every other one out
SLOT_DIR = Path(tempfile.gettempdir()) / f"grader-slots-{os.getuid()}"


# How a submission is run and judged (grader.graded_run): part of every cached run's and
# reference's key, so a new version of either runs everything again.
PROTOCOL = "judged-2"


@dataclass
class RunSettings:
    """Everything that decides how a notebook executes (and so is part of the cache key).

    Plain values: a course's nbgrader config is turned into these by
    `grader.sandbox.execute.run_settings`, so this module needs nothing of nbgrader.
    """

    mode: str
    kernel_name: str
    cell_timeout: int
    budget: int
    startup_timeout: int
    extra_arguments: list
    limits: dict
    uid_base: int
    tmp_mb: int
    readonly: list = field(default_factory=list)
    packages: list = field(default_factory=list)
    hidden: list = field(default_factory=list)

    def fingerprint(self) -> dict:
        """The settings that change results; paths to hide or show do not."""
        found = {k: getattr(self, k) for k in
                 ("mode", "kernel_name", "cell_timeout", "budget", "extra_arguments", "limits")}
        found["protocol"] = PROTOCOL
        return found


@dataclass
class RunResult:
    nb: object
    reasons: list
    seconds: float
    mode: str


def execution_key(nb, workdir, settings: RunSettings) -> str:
    """Content hash of what is executed: the notebook, the files beside it, the settings."""
    digest = hashlib.sha256()
    # cell ids are left out: nbgrader gives a restored (deleted) cell a fresh random id
    # on every pass, and outputs are matched by position anyway
    cells = [{k: v for k, v in cell.items() if k != "id"} for cell in nb.get("cells", [])]
    digest.update(json.dumps({"cells": cells, "metadata": nb.get("metadata", {})},
                             sort_keys=True).encode())
    for path in sorted(Path(workdir).rglob("*")):
        if path.is_file() and path.suffix != ".ipynb":
            digest.update(str(path.relative_to(workdir)).encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(json.dumps(settings.fingerprint(), sort_keys=True).encode())
    return digest.hexdigest()[:32]


class SlotLease:
    """A worker slot number no other grading process on this machine holds right now.

    Slots give each concurrent sandbox its own uid when grading as root, so one
    sandbox's processes never count against another's limit.
    """

    def __enter__(self) -> int:
        SLOT_DIR.mkdir(parents=True, exist_ok=True)
        for slot in range(1024):
            handle = open(SLOT_DIR / f"slot-{slot}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self._handle, self.slot = handle, slot
            return slot
        raise RuntimeError("no free sandbox slot (1024 executions at once?)")

    def __exit__(self, *exc):
        self._handle.close()


def _copy_work(src, dest):
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"),
                    symlinks=False)


def _chown_tree(path, uid):
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, uid, uid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, uid)


def _keep_files(src: Path, dest: Path, limit: int):
    """Copy the regular files under `src` to an emptied `dest`, at most `limit` bytes in all.

    `src` was written by the sandbox: a link is never followed (it could name any host file),
    and what does not fit is left out rather than filling the grader's disk.
    """
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    total = 0
    for dirpath, _, filenames in os.walk(src):
        for name in filenames:
            path = Path(dirpath) / name
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link, or gone
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if not stat.S_ISREG(info.st_mode) or total + info.st_size > limit:
                    continue
                total += info.st_size
                target = dest / path.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as out:
                    shutil.copyfileobj(handle, out)
                os.chmod(target, stat.S_IMODE(info.st_mode) & 0o755)


def run_notebook(nb, workdir, settings: RunSettings, log=None, env=None, substitutes=None,
                 carry=None) -> RunResult:
    """Execute `nb` with a copy of `workdir` as its working directory, confined and limited.

    `env` adds variables to the sandbox's environment; `substitutes` ({host package folder:
    folder}) shows another folder where a package lies (a build without some of its parts).
    `carry` is a host folder of caches handed from one run of a submission to the next:
    the compiled modules of its ``%%cython`` cells and of its CUDA kernels on the host
    stand-in for cupy (see worker.py). Its regular files go in with the job and come back
    when the run ends, so the next run of the same code skips the compiler. Only one
    submission's own runs may share one: a module built by one student's run is that
    student's code, and the instructor's reference run never gets one.
    """
    mode, warnings = choose(settings.mode)
    for warning in warnings:
        log and log.warning(warning)
    if substitutes and mode == "none":
        raise RuntimeError("a package build can only be shown inside a sandbox (c.Sandbox.mode "
                           "is 'none'); grading with withheld parts needs bubblewrap or unshare")
    conf = Confinement(mode=mode, readonly=interpreter_paths() + settings.readonly,
                       packages=package_dirs(settings.packages), hidden=settings.hidden,
                       tmp_mb=settings.tmp_mb, substitutes=dict(substitutes or {}),
                       extra_env=dict(env or {}))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grader-job-") as job, SlotLease() as slot:
        job = Path(job)
        _copy_work(workdir, job / "work")
        nbformat.write(nb, str(job / "in.ipynb"))
        if carry is not None:
            _keep_files(Path(carry), job / "carry", settings.tmp_mb << 20)
        limits = dict(settings.limits)
        uid = settings.uid_base + slot if (os.geteuid() == 0 and mode != "none") else None
        if uid is None and mode != "none" and not process_count.counted_per_namespace():
            # an older kernel counts all of this uid's processes against each sandbox's limit
            limits["max_processes"] += process_count.processes_of(os.getuid())
        spec = {"kernel_name": settings.kernel_name, "cell_timeout": settings.cell_timeout,
                "budget": settings.budget, "startup_timeout": settings.startup_timeout,
                "extra_arguments": settings.extra_arguments, "limits": limits}
        (job / "job.json").write_text(json.dumps(spec))
        if uid is not None:
            _chown_tree(job, uid)
        os.chmod(job, 0o700)
        inside = conf.paths_inside(str(job))
        argv = [sys.executable, "-I", f"{inside['code']}/worker.py", inside["job"]]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if mode == "none":
            env = {**conf.environment(), "HOME": str(job / "work")}
        hard_limit = settings.budget + settings.startup_timeout + 30
        with open(job / "worker.log", "wb") as out:
            proc = subprocess.Popen(conf.command(str(job), argv, uid=uid), stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    cwd=str(job))
            killed = False
            try:
                proc.wait(timeout=hard_limit)
            except subprocess.TimeoutExpired:
                killed = True
            finally:
                # the whole process group: the worker, the kernel, anything it forked
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        status, executed = _read_results(job)
        if killed:
            status["reason"] = f"the notebook's time budget of {settings.budget} s ran out"
        elif executed is None and not status.get("reason"):
            tail = (job / "worker.log").read_text(errors="replace")[-800:]
            status["reason"] = f"the sandboxed run failed before executing (exit {proc.returncode})"
            log and log.error("sandbox worker failed: %s", tail)
        if carry is not None:
            _keep_files(job / "carry", Path(carry), settings.tmp_mb << 20)
    merged, reasons = merge_outputs(nb, executed, status)
    return RunResult(nb=merged, reasons=reasons, seconds=time.monotonic() - start, mode=mode)


def _read_results(job: Path):
    try:
        status = json.loads((job / "status.json").read_text())
        if not isinstance(status, dict):
            raise ValueError
    except (OSError, ValueError):
        status = {"completed": 0, "running": None, "reason": None}
    try:
        executed = nbformat.read(str(job / "out.ipynb"), as_version=4)
    except Exception:  # noqa: BLE001 - a missing or mangled result means nothing completed
        executed = None
    return status, executed


def stop_output(reason: str):
    return nbformat.v4.new_output(
        "error", ename=STOP_NAME, evalue=reason,
        traceback=[f"{STOP_NAME}: {reason}; this cell did not complete and scores 0"])


def merge_outputs(trusted, executed, status: dict):
    """Outputs of completed cells onto the trusted notebook; a stop error on every other code cell."""
    result = copy.deepcopy(trusted)
    usable = (executed is not None and len(executed.cells) == len(result.cells) and all(
        a.cell_type == b.cell_type for a, b in zip(executed.cells, result.cells)))
    completed = int(status.get("completed") or 0) if usable else 0
    running = status.get("running") if usable else None
    reason = status.get("reason")
    if not usable and reason is None:
        reason = "the execution result could not be read back"
    if usable:
        result.metadata["language_info"] = executed.metadata.get("language_info", {})
    for index, cell in enumerate(result.cells):
        if cell.cell_type != "code":
            continue
        if usable and (index < completed or index == running):
            cell.outputs = executed.cells[index].get("outputs", [])
            cell.execution_count = executed.cells[index].get("execution_count")
        if index >= completed:
            cell.outputs.append(stop_output(reason or "execution stopped"))
    reasons = [reason] if reason and completed < len(result.cells) else []
    return result, reasons
