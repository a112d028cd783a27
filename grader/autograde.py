"""`grader autograde ASSIGNMENT -j N`: nbgrader's autograde, with executions in N sandboxes.

nbgrader's pipeline runs three times over the collected submissions, all in this
process and so with a single writer to the gradebook:

1. plan: nbgrader sanitises every submission (restores tests, drops duplicated ids,
   pins the kernel) and `StageForSandbox` queues each notebook whose execution is
   not cached yet;
2. execute: the queue runs in N parallel sandboxes, each result cached by content;
3. grade: nbgrader runs for real; `SandboxedExecute` finds every execution cached,
   and nbgrader scores, applies late penalties and writes the gradebook.

Executions are keyed by content, so the results do not depend on N, a re-run only
regrades, and a run killed at any point resumes where it stopped.
"""

import fcntl
import json
import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import nbformat
from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from grader import GraderError, graded_run, notes
from grader.sandbox.confinement import choose
from grader.sandbox.execute import SandboxedExecute, run_settings
from grader.settings import Sandbox
from grader.state import CourseState, record_execution
from grader.submission_checks import inspect


@dataclass
class AutogradeReport:
    assignment: str
    scores: dict = field(default_factory=dict)      # student -> (score, max_score, penalty)
    failed: dict = field(default_factory=dict)      # student -> reason nbgrader could not grade
    notes: dict = field(default_factory=dict)       # student -> [note]
    executed: int = 0
    seconds: float = 0.0
    sandbox: str = ""


def submitted_students(course, assignment) -> list:
    base = course.path("submitted")
    return sorted(p.parent.name for p in base.glob(f"*/{assignment}") if p.is_dir())


def _run_nbgrader(course, assignment, exclude, overrides: Config, log):
    cfg = course.merged(overrides)
    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    coursedir.student_id = "*"
    coursedir.student_id_exclude = ",".join(exclude)
    app = Autograde(coursedir=coursedir, config=cfg)
    app.force = True
    app.log = logging.getLogger("grader.nbgrader")
    try:
        app.start()
    except Exception as err:  # noqa: BLE001 - per-student failures are reported from the results
        log.warning("nbgrader reported errors: %s", err)


def _execute_queue(course, jobs, log):
    entries = sorted(p for p in CourseState(course.root).queue.glob("*") if (p / "in.ipynb").exists())
    if not entries:
        return 0
    settings = run_settings(course.config, course.root)

    # the instructor's reference runs and the package builds, once, before the parallel runs
    for assignment, notebook in sorted({(job["assignment"], job["notebook"]) for job in
                                        (json.loads((e / "job.json").read_text()) for e in entries)}):
        graded_run.prepare(course.root, assignment, notebook, settings, log)

    def execute(entry):
        nb = nbformat.read(str(entry / "in.ipynb"), as_version=4)
        job = json.loads((entry / "job.json").read_text())
        result = graded_run.execute(nb, entry / "work", settings, course.root, job["assignment"],
                                    job["notebook"], log=log)
        record_execution(course.root, entry.name, result)
        shutil.rmtree(entry, ignore_errors=True)
        log.info("executed %s in %.1f s", entry.name, result.seconds)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(execute, entries))
    return len(entries)


def _zero_unreadable(course, assignment, student, log):
    """Record a submission nbgrader cannot read as submitted, with every grade 0."""
    from nbgrader.coursedir import CourseDirectory as CD

    timestamp = CD(config=course.config).get_existing_timestamp(
        str(course.path("submitted", student, assignment)))
    with course.gradebook() as gb:
        gb.update_or_create_student(student)
        if timestamp:
            gb.update_or_create_submission(assignment, student, timestamp=timestamp)
        else:
            gb.update_or_create_submission(assignment, student)
        submission = gb.find_submission(assignment, student)
        for nb in submission.notebooks:
            for grade in nb.grades:
                grade.auto_score = 0
                grade.manual_score = None
                grade.needs_manual_grade = False
        gb.db.commit()
    shutil.rmtree(course.path("autograded", student, assignment), ignore_errors=True)


def _single_run(course):
    """An exclusive lock on the course's autograde (the gradebook has one writer).

    flock is released when the process dies, so a killed run never blocks the next.
    """
    path = CourseState(course.root).autograde_lock
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise GraderError("another `grader autograde` is running on this course; wait for it") from None
    return handle


def autograde(course, assignment, jobs=1, log=None) -> AutogradeReport:
    with _single_run(course):
        return _autograde(course, assignment, jobs, log or logging.getLogger("grader"))


def _autograde(course, assignment, jobs, log) -> AutogradeReport:
    start = time.monotonic()
    report = AutogradeReport(assignment=assignment)
    with course.gradebook() as gb:
        try:
            gb.find_assignment(assignment)
        except Exception:  # noqa: BLE001 - nbgrader raises MissingEntry
            raise GraderError(f"assignment {assignment!r} is not in the gradebook; "
                              f"run `grader generate {assignment}` first") from None
    students = submitted_students(course, assignment)
    if not students:
        raise GraderError(f"no collected submissions of {assignment!r}; run `grader collect {assignment}`")
    try:
        mode, warnings = choose(course.section(Sandbox).mode)
    except RuntimeError as err:
        raise GraderError(str(err)) from None
    for warning in warnings:
        log.warning(warning)
    report.sandbox = mode

    unreadable = []
    for student in students:
        broken, missing = inspect(course, assignment, student)
        notes.record(course.root, assignment, student, "checks", broken + missing)
        if broken:
            unreadable.append(student)

    # 1. plan
    state = CourseState(course.root)
    shutil.rmtree(state.staging, ignore_errors=True)
    plan = Config()
    plan.CourseDirectory.autograded_directory = CourseState.STAGING_RELATIVE
    plan.Autograde.autograde_preprocessors = ["grader.sandbox.execute.StageForSandbox"]
    _run_nbgrader(course, assignment, unreadable, plan, log)
    shutil.rmtree(state.staging, ignore_errors=True)

    # 2. execute
    report.executed = _execute_queue(course, jobs, log)

    # 3. grade
    inline_before = SandboxedExecute.inline_runs
    _run_nbgrader(course, assignment, unreadable, Config(), log)
    if SandboxedExecute.inline_runs != inline_before:
        log.warning("%d executions were not planned and ran one at a time",
                    SandboxedExecute.inline_runs - inline_before)
    for student in unreadable:
        _zero_unreadable(course, assignment, student, log)

    with course.gradebook() as gb:
        for student in students:
            autograded = course.path("autograded", student, assignment)
            if student not in unreadable and not autograded.exists():
                report.failed[student] = "nbgrader could not grade it (see the log above)"
            try:
                sub = gb.find_submission(assignment, student)
            except Exception:  # noqa: BLE001
                continue
            report.scores[student] = (sub.score, sub.max_score, sub.late_submission_penalty or 0.0)
    # copies of the package's code or of another student's: private notes for the instructor
    from grader.similarity import similarity

    similarity(course, assignment)
    for student in students:
        report.notes[student] = notes.lines(course.root, assignment, student)
    report.seconds = time.monotonic() - start
    return report
