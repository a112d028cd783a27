"""A course's term as students see it: due dates, extensions and late days.

Extensions are nbgrader's (`SubmittedAssignment.extension` in the gradebook), so
nbgrader's own seconds late, the formgrader and the late-penalty plugin all count
from the extended date. Students cannot read the gradebook, so the instructor's
commands that change the term publish it into the exchange:

    EXCHANGE/COURSE/term/term.json            the late rule and every due date (UTC)
    EXCHANGE/COURSE/term/students/ID.json     one student's extensions and late days

`students/` cannot be listed (0711), but a file there is readable by anyone who knows
the student's account name: an extension's length and a count of late days, never a
reason or a grade.
"""

import datetime
import json
import os
import re
from pathlib import Path

from grader import GraderError
from grader.late import LateRule, charge, late_days_spent
from grader.settings import LatePolicy
from grader.state import write_atomic

UTC = datetime.timezone.utc
UNITS = {"w": 7 * 24 * 60, "d": 24 * 60, "h": 60, "m": 1}


def parse_duration(text: str) -> datetime.timedelta:
    """`2d`, `36h`, `1d12h`, `90m`, `1w`; `0` removes an extension."""
    text = text.strip().lower().replace(" ", "")
    if text == "0":
        return datetime.timedelta(0)
    found = re.findall(r"(\d+(?:\.\d+)?)([wdhm])", text)
    if not found or "".join(n + u for n, u in found) != text:
        raise GraderError(f"cannot read the duration {text!r}; use e.g. 2d, 36h, 1d12h, 90m or 0")
    return datetime.timedelta(minutes=sum(float(n) * UNITS[u] for n, u in found))


def format_duration(delta) -> str:
    minutes = round(delta.total_seconds() / 60)
    if minutes <= 0:
        return "0"
    parts = []
    for unit in ("d", "h", "m"):
        count, minutes = divmod(minutes, UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


# ---- the instructor's side -----------------------------------------------------------

def _assignment(gb, assignment):
    from nbgrader.api import MissingEntry

    try:
        return gb.find_assignment(assignment)
    except MissingEntry:
        raise GraderError(f"assignment {assignment!r} is not in the gradebook; "
                          f"run `grader generate {assignment}` first") from None


def grant_extension(course, assignment, student, duration: datetime.timedelta) -> None:
    """Extend `student`'s due date of `assignment` by `duration` (0 removes it).

    nbgrader keeps extensions on the student's submission, so one is recorded (without
    a timestamp, graded as nothing) when the student has not submitted yet; autograde
    later fills it in and keeps the extension.
    """
    with course.gradebook() as gb:
        _assignment(gb, assignment)
        gb.update_or_create_student(student)
        gb.update_or_create_submission(assignment, student)
        gb.grant_extension(assignment, student, minutes=duration.total_seconds() / 60)
    publish(course)


def extensions(course, assignment) -> dict:
    """{student: timedelta} of every extension of `assignment`."""
    with course.gradebook() as gb:
        _assignment(gb, assignment)
        return {sub.student_id: sub.extension for sub in gb.assignment_submissions(assignment)
                if sub.extension}


def term_record(course) -> tuple:
    """(term.json's content, {student: their file's content}) from the gradebook now."""
    rule = LateRule.of(course.section(LatePolicy))
    with course.gradebook() as gb:
        due = {a.name: _iso(a.duedate) for a in gb.assignments}
        students = {}
        for student in gb.students:
            spent = late_days_spent(gb, rule, student.id)
            students[student.id] = {
                "extensions": {sub.assignment.name: sub.extension.total_seconds()
                               for sub in student.submissions if sub.extension},
                "late_days_used": spent,
                "late_days_left": max(0, rule.late_day_budget - sum(spent.values())),
            }
    return {"course_id": course.course_id, "rule": rule.as_dict(), "due": due}, students


def _iso(moment):
    return moment.replace(tzinfo=UTC).isoformat() if moment else None


def term_folder(exchange_root, course_id) -> Path:
    return Path(exchange_root) / course_id / "term"


def publish(course) -> Path:
    """Write the term into the exchange (see the module's doc); returns its folder."""
    from grader.regrade import ensure_request_folders

    term, students = term_record(course)
    folder = term_folder(course.exchange_root, course.course_id)
    (folder / "students").mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    os.chmod(folder / "students", 0o711)
    _write_public(folder / "term.json", term)
    for student, record in students.items():
        _write_public(folder / "students" / f"{student}.json", record)
    ensure_request_folders(course)
    return folder


def _write_public(path, record):
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True))
    os.chmod(path, 0o644)


# ---- the student's side ----------------------------------------------------------------

def read_term(course_id, exchange_root, student) -> dict:
    """The published term with this student's own record merged in; {} if none is published."""
    folder = term_folder(exchange_root, course_id)
    try:
        term = json.loads((folder / "term.json").read_text())
    except (OSError, ValueError):
        return {}
    try:
        term["me"] = json.loads((folder / "students" / f"{student}.json").read_text())
    except (OSError, ValueError):
        rule = LateRule.from_dict(term.get("rule", {}))
        term["me"] = {"extensions": {}, "late_days_used": {}, "late_days_left": rule.late_day_budget}
    return term


def local_zone():
    """The student's zone: `TZ` when it names one, else the machine's local zone."""
    from zoneinfo import ZoneInfo

    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ValueError, OSError, KeyError):
            pass
    return datetime.datetime.now().astimezone().tzinfo


def shown(moment: datetime.datetime) -> str:
    """`moment` in the student's zone, with that zone named."""
    zone = local_zone()
    local = moment.astimezone(zone)
    name = getattr(zone, "key", None)
    return local.strftime("%a %d %b %Y %H:%M %Z") + (f" ({name})" if name else "")


def due_dates(term, assignment):
    """(due date, extension, extended due date) of `assignment` for this student; Nones if unset."""
    text = term.get("due", {}).get(assignment)
    if not text:
        return None, None, None
    due = datetime.datetime.fromisoformat(text)
    seconds = term.get("me", {}).get("extensions", {}).get(assignment)
    extension = datetime.timedelta(seconds=seconds) if seconds else None
    return due, extension, due + (extension or datetime.timedelta(0))


def status_lines(term, assignment) -> list:
    """What a student is told about `assignment`: due date, extension, late days left."""
    if not term:
        return []
    due, extension, extended = due_dates(term, assignment)
    rule = LateRule.from_dict(term.get("rule", {}))
    lines = [f"due {shown(due)}" if due else "no due date set"]
    if extension:
        lines.append(f"your extension: {format_duration(extension)}, so due {shown(extended)}")
    if rule.penalty == "late_days":
        lines.append(f"late days left: {term['me'].get('late_days_left', rule.late_day_budget)} "
                     f"of {rule.late_day_budget}")
    lines.append(f"late work: {rule.describe()}")
    return lines


def submission_cost(term, assignment, now=None):
    """(LateCharge, text) if submitting `assignment` at `now` is late; None when on time."""
    due, _, extended = due_dates(term, assignment) if term else (None, None, None)
    if extended is None:
        return None
    now = now or datetime.datetime.now(UTC)
    if now <= extended:
        return None
    rule = LateRule.from_dict(term.get("rule", {}))
    order = [name for name, _ in sorted(term.get("due", {}).items(),
                                        key=lambda item: (item[1] is not None, item[1] or "", item[0]))]
    used = term.get("me", {}).get("late_days_used", {})
    before = order[:order.index(assignment)] if assignment in order else []
    available = rule.late_day_budget - sum(used.get(name, 0) for name in before)
    cost = charge(rule, (now - extended).total_seconds(), available)
    late = format_duration(now - extended) or "under a minute"
    text = f"{assignment} was due {shown(extended)}; this submission is {late} late: {cost.describe()}"
    if cost.late_days_used:
        text += f" ({available - cost.late_days_used} late day(s) left after it)"
    return cost, text
