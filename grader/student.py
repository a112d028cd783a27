"""The student commands, run in the student's own directory: nbgrader's exchange clients
(fetch, submit, fetch-feedback, fetch-solutions) and its validator, with the term the
instructor published (due date in the student's zone, extension, late days: `grader.term`),
the student's released score and regrade requests.
"""

import getpass
from pathlib import Path

from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeError, ExchangeFactory
from nbgrader.utils import capture_log

from grader import GraderError
from grader.course import student_config
from grader.settings import SolutionRelease


def _run(kind, assignment, course_id, exchange=None, student=None, **attrs):
    cfg = student_config(course_id, exchange, student or getpass.getuser())
    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    app = getattr(ExchangeFactory(config=cfg), kind)(
        coursedir=coursedir, authenticator=Authenticator(config=cfg), config=cfg)
    for key, value in attrs.items():
        setattr(app, key, value)
    result = capture_log(app)
    if not result.get("success"):
        log = result.get("log", "")
        reason = [line for line in log.splitlines() if "ERROR" in line or "CRITICAL" in line]
        raise GraderError(f"{kind} {assignment} failed: " +
                          ("; ".join(reason) or result.get("error", "").strip().splitlines()[-1]))
    return result


def fetch(assignment, course_id, exchange=None, student=None) -> str:
    _run("FetchAssignment", assignment, course_id, exchange, student)
    return str(Path.cwd() / assignment)


def submit(assignment, course_id, exchange=None, student=None) -> str:
    if not (Path.cwd() / assignment).is_dir():
        raise GraderError(f"no folder ./{assignment} to submit; fetch it first")
    _run("Submit", assignment, course_id, exchange, student)
    return student or getpass.getuser()


def fetch_feedback(assignment, course_id, exchange=None, student=None) -> list:
    _run("FetchFeedback", assignment, course_id, exchange, student)
    pages = sorted((Path.cwd() / assignment / "feedback").rglob("*.html"))
    if not pages:
        raise GraderError(f"no feedback released for {assignment} yet")
    return [str(p) for p in pages]


def fetch_solutions(assignment, course_id, exchange=None, student=None) -> str:
    name = assignment + SolutionRelease().suffix
    try:
        _run("FetchAssignment", name, course_id, exchange, student)
    except GraderError as err:
        if "not" in str(err).lower():
            raise GraderError(f"the solutions of {assignment} are not released (yet)") from None
        raise
    return str(Path.cwd() / name)


def validate(assignment) -> list:
    """(notebook, failures) for each notebook of ./ASSIGNMENT, run locally like nbgrader validate."""
    from nbgrader.validator import Validator

    folder = Path.cwd() / assignment
    notebooks = sorted(folder.glob("*.ipynb"))
    if not notebooks:
        raise GraderError(f"no notebooks in ./{assignment}")
    results = []
    for path in notebooks:
        found = Validator().validate(str(path))
        problems = len(found.get("failed", [])) + len(found.get("changed", [])) + \
            len(found.get("type_changed", []))
        results.append((path.name, problems, found))
    return results


def _where(course_id, exchange=None, student=None):
    """(exchange root, nbgrader's local cache, student) as the exchange clients see them."""
    from nbgrader.exchange.default.exchange import Exchange

    cfg = student_config(course_id, exchange, student or getpass.getuser())
    return cfg.Exchange.root, Exchange(config=cfg).cache, cfg.CourseDirectory.student_id


def term_status(assignment, course_id, exchange=None, student=None) -> list:
    """Lines about `assignment`'s due date, this student's extension and late days; [] if
    the course published no term."""
    from grader.term import read_term, status_lines

    root, _, who = _where(course_id, exchange, student)
    return status_lines(read_term(course_id, root, who), assignment)


def lateness(assignment, course_id, exchange=None, student=None, now=None):
    """What submitting now costs, as a sentence, or None when it is on time."""
    from grader.term import read_term, submission_cost

    root, _, who = _where(course_id, exchange, student)
    found = submission_cost(read_term(course_id, root, who), assignment, now)
    return found[1] if found else None


def my_score(assignment, course_id, exchange=None, student=None) -> dict:
    from grader.scores import my_score as released

    root, cache, who = _where(course_id, exchange, student)
    return released(cache, course_id, root, assignment, who)


def regrade(assignment, part, reason, course_id, exchange=None, student=None) -> str:
    from grader.regrade import file_request

    root, cache, who = _where(course_id, exchange, student)
    return file_request(cache, course_id, root, who, assignment, part, reason)


def my_regrades(assignment, course_id, exchange=None, student=None) -> list:
    from grader.regrade import my_requests

    root, cache, _ = _where(course_id, exchange, student)
    return my_requests(cache, course_id, root, assignment)


FEEDBACK_STATES = {
    "changed": "feedback changed since you fetched it: fetch it again (grader fetch-feedback)",
    "ready": "feedback ready to be fetched (grader fetch-feedback)",
    "fetched": "feedback fetched",
    None: "no feedback yet",
}


def feedback_state(submissions) -> str:
    """One of FEEDBACK_STATES's keys for an assignment's submissions as nbgrader lists them.

    nbgrader compares the checksum of the student's copy of each feedback page with the
    exchange's (`feedback_updated`), so feedback released again after a regrade counts as
    changed, as the Assignments panel shows it.
    """
    if any(s.get("feedback_updated") for s in submissions):
        return "changed"
    latest = submissions[-1] if submissions else {}
    if latest.get("has_local_feedback"):
        return "fetched"
    if latest.get("has_exchange_feedback"):
        return "ready"
    return None


def assignment_list(course_id, exchange=None, student=None) -> list:
    """[(assignment, status, feedback state or None)] of the course for this student:
    released or fetched (nbgrader's list), then submitted (its list of the local cache)."""
    from nbgrader.exchange.default.list import ExchangeList

    listed = []
    for cached in (False, True):
        cfg = student_config(course_id, exchange, student or getpass.getuser())
        cfg.ExchangeList.cached = cached
        lister = ExchangeList(coursedir=CourseDirectory(config=cfg), authenticator=Authenticator(config=cfg),
                              config=cfg)
        try:
            found = lister.start()
        except ExchangeError as err:
            raise GraderError(f"cannot list the assignments of {course_id}: {err}") from None
        who = cfg.CourseDirectory.student_id
        for entry in found:
            if cached and entry.get("student_id") not in (who, None):
                continue  # another account's submission in a shared cache
            state = feedback_state(entry.get("submissions", [])) if cached else None
            listed.append((entry["assignment_id"], entry["status"], state))
    return sorted(listed)
