"""One submission's graded execution: the package without the graded parts, the verdicts here.

A notebook whose first cell declares withheld parts (``coursekit.start``) is graded so
that, while any task's tests run, the package's implementation of that task is not in the
process, and whether a test passed is decided outside it (``grader.judge``):

1. the reference: the instructor's notebook (the course's ``source/``) runs once, in the
   sandbox with the whole package, reporting its checks and its declaration; it is kept in
   ``.grader/reference/`` (outside every sandbox) until the notebook or the package change;
2. run A: the submission runs once against a build of the package without any task's
   parts (``grader.package_build``), so every part is the student's own; each test cell
   is judged against the reference;
3. run B, for each task with a failing test cell in A: the submission runs again, only
   that task's test cells, against a build without that task alone, so the other tasks'
   references stand in for whatever else the student has not finished. Its test cells are
   judged the same way and replace A's. What A compiled (its ``%%cython`` cells, its CUDA
   kernels on the host stand-in for cupy) is handed to its Bs, which run the same code:
   a run only ever sees modules built from its own submission, never another's nor the
   instructor's.

Every task's cells are scored from a run whose package did not contain that task, and a
task fails in B only for its own sake: one missing task costs only its own points. A
complete, correct submission takes one run; a run A stopped by a limit (time, memory, a
dead kernel) is not retried for the cells it never reached.
"""

import copy
import hashlib
import json
import logging
import tempfile
from pathlib import Path

import nbformat

from grader import GraderError
from grader import judge as judging
from grader.package_build import Removal, build, identifiers, package_dir, tasks_reaching_blocked
from grader.sandbox.atomic import write_atomic
from grader.sandbox.run import RunResult, run_notebook
from grader.sandbox.worker import is_test_cell
from grader.state import STATE_DIR

RECORD_VARIABLE = "COURSEKIT_RECORD"
ABSENT_VARIABLE = "COURSEKIT_ABSENT_TASKS"


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
    return h.hexdigest()[:20]


def _source_notebook(course_root, assignment, notebook) -> Path:
    return Path(course_root) / "source" / assignment / f"{notebook}.ipynb"


def _package_state(names) -> str:
    """A digest of the packages' files (names, sizes, times): a rebuilt package is a new one."""
    h = hashlib.sha256()
    for name in sorted(names):
        try:
            root = package_dir(name)
        except LookupError:
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                stat = path.stat()
                h.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def reference(course_root, assignment, notebook, settings, log) -> judging.Reference:
    """The instructor's run of ``notebook`` (made once, then kept; see the module docstring)."""
    source = _source_notebook(course_root, assignment, notebook)
    if not source.exists():
        raise GraderError(f"{source} is missing: the instructor's notebook is what submissions are "
                          "judged against")
    key = _digest(source.read_bytes(), _package_state(settings.packages),
                  json.dumps(settings.fingerprint(), sort_keys=True))
    store = Path(course_root) / STATE_DIR / "reference" / assignment / f"{notebook}-{key}.json"
    if store.exists():
        return judging.Reference.from_json(json.loads(store.read_text()))
    nb = nbformat.read(str(source), as_version=4)
    log.info("running the instructor's %s/%s once for the reference values", assignment, notebook)
    result = run_notebook(nb, source.parent, settings, log=log, env={RECORD_VARIABLE: "1"})
    # a case that raised is reported, not raised (coursekit.checks.case)
    failing = [judging.grade_id(c) or f"cell {i}" for i, c in enumerate(result.nb.cells)
               if is_test_cell(c) and (judging.has_error(c) or any("error" in r for r in judging.checks(c)))]
    if failing or result.reasons:
        raise GraderError(f"the instructor's {assignment}/{notebook} fails its own tests in the sandbox "
                          f"({', '.join(failing[:5]) or '; '.join(result.reasons)}); fix the source notebook "
                          "or the sandbox's packages (grader doctor) before grading")
    ref = judging.Reference(
        cells={judging.grade_id(c): judging.checks(c) for c in result.nb.cells if is_test_cell(c)},
        declaration=judging.declaration(result.nb), digest=key)
    store.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(store, json.dumps(ref.to_json()))
    return ref


def _removals(declaration, only_task=None) -> dict:
    """{dotted path: task} of a build: every task's parts, or one task's."""
    paths = {}
    for task, names in declaration.get("tasks", {}).items():
        if only_task in (None, task):
            for name_paths in names.values():
                for path in name_paths:
                    paths[path] = task
    return paths


def names_used(notebook: Path) -> frozenset:
    """Every identifier the code cells of a notebook use (names and attribute names)."""
    import ast
    import re

    found = set()
    for cell in nbformat.read(str(notebook), as_version=4).cells:
        if cell.cell_type != "code":
            continue
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                         for line in cell.source.splitlines())
        try:
            found.update(identifiers(ast.parse(code)))
        except SyntaxError:         # Cython and other cell languages: every word
            found.update(re.findall(r"[A-Za-z_]\w*", cell.source))
    return frozenset(found)


# {(course, assignment, package, declaration, keep): builds}: finding which helpers a task's code
# reaches reads the whole package, once per grading process rather than once per submission
_BUILDS = {}


def builds(course_root, assignment, declaration, package, log=None, keep=frozenset()) -> dict:
    """{"*": build without every task, task: build without that task} (made once, kept).

    ``keep``: names the instructor's notebook uses, which no build takes away as a helper.
    """
    key = (str(course_root), assignment, package, json.dumps(declaration, sort_keys=True), frozenset(keep))
    found = _BUILDS.get(key)
    if found and all((folder.parent / "build.json").exists() for folder in found.values()):
        return found
    tasks = list(declaration.get("tasks", {}))
    blocked = tasks_reaching_blocked(declaration, package)
    wanted = {"*": {**_removals(declaration), **{p: min(t) if t else assignment for p, t in blocked.items()}}}
    for task in tasks:
        wanted[task] = {**_removals(declaration, task),
                        **{p: task for p, t in blocked.items() if task in t or not t}}
    root = package_dir(package)
    found = {}
    for name, paths in wanted.items():
        removal = Removal(package, paths, frozenset(keep))
        folder = Path(course_root) / STATE_DIR / "builds" / assignment / removal.digest(root)
        if not (folder / "build.json").exists():
            (log or logging.getLogger("grader")).info("building %s without %s's parts", package,
                                                       "every task" if name == "*" else name)
            build(removal, folder)
        found[name] = folder / package
    _BUILDS[key] = found
    return found


def prepare(course_root, assignment, notebook, settings, log=None):
    """Make the reference and the builds that grading ``notebook`` will use."""
    log = log or logging.getLogger("grader")
    ref = reference(course_root, assignment, notebook, settings, log)
    if ref.declaration and ref.declaration.get("tasks"):
        builds(course_root, assignment, ref.declaration, _declared_package(ref, assignment, notebook), log=log,
               keep=names_used(_source_notebook(course_root, assignment, notebook)))
    return ref


def _declared_package(ref, assignment, notebook) -> str:
    """The package whose parts the instructor's notebook withholds (coursekit.start declares it)."""
    package = ref.declaration.get("package")
    if not package:
        raise GraderError(f"the instructor's {assignment}/{notebook} declares withheld parts without naming "
                          "their package; run it again with the course's coursekit")
    return package


# what a part still to be written raises: the released stub, or the kit when a name is missing
MISSING_PART = ("not implemented yet", "does not define it yet")


def _own_part_missing(cell, task) -> bool:
    """Whether the cell failed because ``task``'s own part is not written: run B would give the
    same verdict, since the task's code is the student's there too."""
    return any(out.get("output_type") == "error" and str(out.get("evalue", "")).startswith(f"{task}: ")
               and any(words in out.get("evalue", "") for words in MISSING_PART)
               for out in cell.get("outputs", []))


def _only_task(nb, task, declared):
    """A copy of ``nb`` that ends with ``task``'s last test cell, and whose test cells of other
    tasks do nothing (their results come from A): what runs after a cell cannot change it."""
    copied = copy.deepcopy(nb)
    last = max(i for i, c in enumerate(copied.cells) if is_test_cell(c) and judging.task_of(c, declared) == task)
    del copied.cells[last + 1:]
    for cell in copied.cells:
        if is_test_cell(cell) and judging.task_of(cell, declared) != task:
            cell.source = "pass"
    return copied


def execute(nb, workdir, settings, course_root, assignment, notebook, log=None) -> RunResult:
    """The graded execution of one submitted notebook (see the module docstring)."""
    log = log or logging.getLogger("grader")
    ref = reference(course_root, assignment, notebook, settings, log)
    env = {RECORD_VARIABLE: "1"}
    if not ref.declaration or not ref.declaration.get("tasks"):
        result = run_notebook(nb, workdir, settings, log=log, env=env)
        judging.judge(result.nb, ref)
        return result
    package = _declared_package(ref, assignment, notebook)
    host = str(package_dir(package))
    made = builds(course_root, assignment, ref.declaration, package, log,
                  keep=names_used(_source_notebook(course_root, assignment, notebook)))
    declared = list(ref.declaration["tasks"])
    # Run A, then run B of each task A could not judge for itself; ``carry`` hands what A's code
    # compiled on to the Bs, which run the same code.
    with tempfile.TemporaryDirectory(prefix="grader-carry-") as carry:
        first = run_notebook(nb, workdir, settings, log=log, env={**env, ABSENT_VARIABLE: "*"},
                             substitutes={host: str(made["*"])}, carry=carry)
        # which cells ran to the end in A: a stop (time, memory) is final for the cells it cut off
        stopped = {i for i, c in enumerate(first.nb.cells) if any(
            o.get("output_type") == "error" and o.get("ename") == "SandboxStopped" for o in c.get("outputs", []))}
        outcome = judging.judge(first.nb, ref)
        seconds, reasons = first.seconds, list(first.reasons)
        for task in declared:
            if outcome.get(task, True):
                continue
            cells = [i for i, c in enumerate(first.nb.cells)
                     if is_test_cell(c) and judging.task_of(c, declared) == task and i not in stopped]
            if not cells or all(_own_part_missing(first.nb.cells[i], task) for i in cells
                                if judging.has_error(first.nb.cells[i])):
                continue
            again = run_notebook(_only_task(nb, task, declared), workdir, settings, log=log,
                                 env={**env, ABSENT_VARIABLE: task}, substitutes={host: str(made[task])},
                                 carry=carry)
            judging.judge(again.nb, ref, cells=set(cells))
            for index in cells:
                first.nb.cells[index].outputs = again.nb.cells[index].outputs
                first.nb.cells[index].execution_count = again.nb.cells[index].execution_count
            seconds += again.seconds
            reasons += [f"{task}: {r}" for r in again.reasons]
        return RunResult(nb=first.nb, reasons=reasons, seconds=seconds, mode=first.mode)

