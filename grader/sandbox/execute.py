"""nbgrader preprocessors that put the sandbox into nbgrader's autograde pipeline.

`SandboxedExecute` replaces nbgrader's `Execute` in `Autograde.autograde_preprocessors`
(it subclasses it, so `c.Execute.timeout` still applies). Executions are cached by
content, which is what makes autograde re-runnable: a re-run, or a run restarted after
being killed, reuses every execution that finished and redoes only the rest.

`StageForSandbox` is the planning pass of `grader autograde -j N`: it sits where the
execution would be and only records the sanitised notebook, so the executions can
then run in N parallel sandboxes before nbgrader grades them one by one.
"""

import json
import os
import shutil
from pathlib import Path

import nbformat
from nbgrader.preprocessors import Execute

from grader import notes
from grader.nbgrader_fixes import GraderPreprocessor
from grader.sandbox.run import RunSettings, execution_key, run_notebook

STATE_DIR = ".grader"


class ExecutionCache:
    """Executed notebooks by execution key, under the course's `.grader/executions`."""

    def __init__(self, course_root):
        self.dir = Path(course_root) / STATE_DIR / "executions"

    def get(self, key):
        path = self.dir / f"{key}.ipynb"
        if not path.exists():
            return None
        meta = json.loads((self.dir / f"{key}.json").read_text())
        return nbformat.read(str(path), as_version=4), meta

    def put(self, key, nb, meta) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        # meta first, notebook last: a notebook present means the entry is complete
        _write_atomic(self.dir / f"{key}.json", json.dumps(meta))
        _write_atomic(self.dir / f"{key}.ipynb", nbformat.writes(nb))


def queue_dir(course_root) -> Path:
    return Path(course_root) / STATE_DIR / "queue"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def _course_root(preprocessor) -> str:
    # nbgrader's converters chdir into CourseDirectory.root for the whole conversion
    return os.getcwd()


def _settings(preprocessor, course_root):
    return RunSettings.from_config(preprocessor.config, course_root)


def _incidents(nb) -> list:
    """Timeouts and limit errors, by cell, for the grading notes."""
    found = []
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index}")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") in (
                    "CellTimeoutError", "MemoryError", "SandboxStopped"):
                found.append(f"{grade_id}: {out['ename']}: {out.get('evalue', '')}".rstrip(": "))
    return found


class SandboxedExecute(Execute):
    """nbgrader's Execute, run in a sandbox with limits (see `grader.settings.Sandbox`)."""

    inline_runs = 0  # executions not found in the cache, i.e. not planned ahead

    def preprocess(self, nb, resources):
        root = _course_root(self)
        settings = _settings(self, root)
        workdir = resources.get("metadata", {}).get("path") or root
        key = execution_key(nb, workdir, settings)
        cache = ExecutionCache(root)
        hit = cache.get(key)
        if hit is None:
            SandboxedExecute.inline_runs += 1
            result = run_notebook(nb, workdir, settings, log=self.log)
            meta = {"reasons": result.reasons, "seconds": round(result.seconds, 2), "mode": result.mode}
            cache.put(key, result.nb, meta)
            executed = result.nb
        else:
            executed, meta = hit
            self.log.info("Using the cached sandboxed execution %s", key)
        info = resources.get("nbgrader", {})
        if info.get("student") and info.get("assignment"):
            notes.record(root, info["assignment"], info["student"], f"execution:{info['notebook']}",
                         meta["reasons"] + _incidents(executed))
        return executed, resources


class StageForSandbox(GraderPreprocessor):
    """Record the sanitised notebook and its files as a pending execution (no execution here)."""

    def preprocess(self, nb, resources):
        root = _course_root(self)
        settings = _settings(self, root)
        workdir = resources.get("metadata", {}).get("path") or root
        key = execution_key(nb, workdir, settings)
        if ExecutionCache(root).get(key) is None:
            job = queue_dir(root) / key
            if not (job / "in.ipynb").exists():
                tmp = job.with_name(key + ".partial")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(workdir, tmp / "work",
                                ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
                info = resources.get("nbgrader", {})
                (tmp / "job.json").write_text(json.dumps({
                    "student": info.get("student"), "assignment": info.get("assignment"),
                    "notebook": info.get("notebook")}))
                nbformat.write(nb, str(tmp / "in.ipynb"))
                shutil.rmtree(job, ignore_errors=True)
                os.replace(tmp, job)
        return nb, resources
