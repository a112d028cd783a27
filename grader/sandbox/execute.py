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

import nbformat
from nbgrader.preprocessors import Execute

from grader import notes
from grader.nbgrader_fixes import GraderPreprocessor
from grader.sandbox.run import RunSettings, execution_key
from grader.state import CourseState, ExecutionCache, record_execution


def run_settings(config, course_root) -> RunSettings:
    """The sandbox's settings from a course config; in unshare mode the course, the exchange
    and the grader's home are hidden (bubblewrap shows only what it binds anyway)."""
    from grader.settings import Sandbox

    box = Sandbox(config=config)
    ex = SandboxedExecute(config=config)
    extra = list(ex.extra_arguments) or ["--HistoryManager.hist_file=:memory:"]
    return RunSettings(
        mode=box.mode, kernel_name=box.kernel_name, cell_timeout=int(ex.timeout or 30),
        budget=box.notebook_budget, startup_timeout=box.startup_timeout, extra_arguments=extra,
        limits={"memory_bytes": box.memory_mb << 20, "max_processes": box.max_processes,
                "max_file_bytes": box.max_file_mb << 20, "max_open_files": box.max_open_files,
                "cpu_seconds": box.notebook_budget},
        uid_base=box.uid_base, tmp_mb=box.tmp_mb, readonly=list(box.readonly_paths),
        packages=list(box.packages),
        hidden=list(box.hidden_paths) + [str(course_root), os.path.expanduser("~"),
                                         config.get("Exchange", {}).get("root", "/srv/nbgrader/exchange")])


def _course_root(preprocessor) -> str:
    # nbgrader's converters chdir into CourseDirectory.root for the whole conversion
    return os.getcwd()


def _settings(preprocessor, course_root):
    return run_settings(preprocessor.config, course_root)


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
        info = resources.get("nbgrader", {})
        if hit is None:
            from grader import graded_run

            SandboxedExecute.inline_runs += 1
            result = graded_run.execute(nb, workdir, settings, root, info.get("assignment"),
                                        info.get("notebook"), log=self.log)
            meta = record_execution(root, key, result)
            executed = result.nb
        else:
            executed, meta = hit
            self.log.info("Using the cached sandboxed execution %s", key)
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
            job = CourseState(root).queue / key
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
