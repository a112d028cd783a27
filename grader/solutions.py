"""`grader solutions ASSIGNMENT`: nbgrader's generate_solution without the hidden tests,
released through the exchange as `ASSIGNMENT-solution`, which students fetch like an
assignment. Refused before the due date plus `c.SolutionRelease.late_window_hours`.
"""

import datetime
import shutil
from dataclasses import dataclass

from nbgrader.converters import GenerateSolution
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from grader import GraderError
from grader.late import format_utc
from grader.settings import SolutionRelease

RELEASED = "released_solutions"
SOLUTION_PREPROCESSORS = [
    "nbgrader.preprocessors.IncludeHeaderFooter", "nbgrader.preprocessors.LockCells",
    "nbgrader.preprocessors.ClearOutput", "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ClearHiddenTests", "nbgrader.preprocessors.Execute",
]


@dataclass
class SolutionsReport:
    assignment: str
    exchange_name: str
    notebooks: list
    released: bool
    available_from: str


def release_time(course, assignment):
    """The earliest moment solutions may be released, or None without a due date."""
    with course.gradebook() as gb:
        try:
            due = gb.find_assignment(assignment).duedate
        except Exception:  # noqa: BLE001 - MissingEntry
            raise GraderError(f"assignment {assignment!r} is not in the gradebook") from None
    if due is None:
        return None
    window = datetime.timedelta(hours=course.section(SolutionRelease).late_window_hours)
    return due.replace(tzinfo=datetime.timezone.utc) + window


def solutions(course, assignment, release=True, force=False, log=None) -> SolutionsReport:
    policy = course.section(SolutionRelease)
    name = assignment + policy.suffix
    opens = release_time(course, assignment)
    now = datetime.datetime.now(datetime.timezone.utc)
    if not force:
        if opens is None:
            raise GraderError(f"{assignment} has no due date, so its solutions are not released "
                              f"(set one with `grader due {assignment} DATE`, or use --force)")
        if now < opens:
            raise GraderError(f"solutions of {assignment} can be released from {format_utc(opens)} "
                              "(due date plus the late window); use --force to release now")
    cfg = course.merged(Config({"GenerateSolution": {"preprocessors": SOLUTION_PREPROCESSORS}}))
    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    app = GenerateSolution(coursedir=coursedir, config=cfg)
    app.force = True
    if log is not None:
        app.log = log
    try:
        app.start()
    except Exception as err:  # noqa: BLE001 - nbgrader raises its own exception types
        raise GraderError(f"nbgrader generate_solution failed: {err}") from None
    generated = course.path(coursedir.solution_directory, assignment)
    dest = course.path(RELEASED, name)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(generated, dest)
    notebooks = sorted(p.name for p in dest.glob("*.ipynb"))
    begin = cfg.ClearHiddenTests.get("begin_test_delimeter", "BEGIN HIDDEN TESTS")
    for nb in dest.glob("*.ipynb"):
        if begin in nb.read_text():
            raise GraderError(f"{nb} still contains hidden tests; not releasing it")
    released = False
    if release:
        api = course.api(Config({"ExchangeReleaseAssignment": {"force": True},
                                 "CourseDirectory": {"release_directory": RELEASED}}))
        result = api.release_assignment(name)
        if not result.get("success"):
            raise GraderError(f"releasing {name} failed:\n{result.get('log', '')}{result.get('error', '')}")
        released = True
    return SolutionsReport(assignment, name, notebooks, released,
                           format_utc(opens) if opens else "now (forced)")
