"""`grader export ASSIGNMENT --to FILE.csv [--format csv|canvas|moodle|gradescope]`.

`csv` (the default) has one row per student, one column per graded cell, and what the
late policy did: the extension, days late, late days used and left, the rule's verdict.
Its last column holds the instructor's private notes (copies of the package's code or of
another student's, found by `grader similarity`), never shown to students. The other
formats are what each system imports (`grader.lms_formats`).

Read from the gradebook only, so it shows manual grades and late penalties as they
are now. Students without a submission get an empty row marked `submitted = no`, also
when nbgrader holds a submission row for them because an extension was granted before
they submitted; one collected but not autograded yet is `yes, not graded yet`, also
without a score. Every format leaves such a score empty, never 0.
"""

import csv
from pathlib import Path

from grader import GraderError, lms_formats, notes
from grader.late import LateRule, assess, late_days_spent
from grader.lms_formats import number
from grader.settings import LatePolicy, LmsExport

FIXED = ["student_id", "lms_user_id", "first_name", "last_name", "email", "submitted",
         "timestamp", "seconds_late", "extension", "days_late", "late_days_used", "late_days_left"]
# collected but not autograded yet: no score until it is
NOT_GRADED = "yes, not graded yet"
TOTALS = ["raw_score", "late_penalty", "score", "max_score", "needs_manual_grade", "late_policy",
          "instructor_notes"]


def export_rows(course, assignment):
    """(header, rows) of the grades of `assignment`."""
    from nbgrader.api import MissingEntry

    rule = LateRule.of(course.section(LatePolicy))
    with course.gradebook() as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            raise GraderError(f"assignment {assignment!r} is not in the gradebook") from None
        cells = [(nb.name, cell.name) for nb in found.notebooks
                 for cell in sorted(nb.grade_cells, key=lambda c: c.name)]
        header = FIXED + [f"{nb}:{cell}" for nb, cell in cells] + TOTALS
        rows = []
        for student in sorted(gb.students, key=lambda s: s.id):
            row = {"student_id": student.id, "lms_user_id": student.lms_user_id or "",
                   "first_name": student.first_name or "", "last_name": student.last_name or "",
                   "email": student.email or ""}
            try:
                sub = gb.find_submission(assignment, student.id)
            except MissingEntry:
                sub = None
            if sub is not None and sub.extension:
                from grader.term import format_duration

                row.update(extension=format_duration(sub.extension))
            # An extension granted before submitting is a submission row without a timestamp,
            # whose score nbgrader reports as 0: until autograde has graded a collected
            # submission, the row is "not submitted" (or not graded yet) with every score empty.
            # (A graded submission can lack a timestamp too, when its timestamp.txt was missing.)
            if sub is None or (sub.timestamp is None and not course.path("autograded", student.id, assignment).is_dir()):
                collected = course.path("submitted", student.id, assignment).is_dir()
                row.update(submitted=NOT_GRADED if collected else "no")
                rows.append(row)
                continue
            cost = assess(gb, rule, assignment, student.id)
            spent = sum(late_days_spent(gb, rule, student.id).values())
            row.update(days_late=str(cost.days_late), late_days_used=str(cost.late_days_used),
                       late_days_left=str(max(0, rule.late_day_budget - spent)) if rule.penalty == "late_days" else "",
                       late_policy=cost.describe())
            scores = {(nb.name, grade.name): grade.score for nb in sub.notebooks for grade in nb.grades}
            row.update(
                submitted="yes", timestamp=str(sub.timestamp or ""), seconds_late=number(sub.total_seconds_late),
                raw_score=number(sub.score), late_penalty=number(sub.late_submission_penalty or 0),
                score=number(max(sub.score - (sub.late_submission_penalty or 0), 0)),
                max_score=number(sub.max_score), needs_manual_grade="yes" if sub.needs_manual_grade else "no",
                instructor_notes=" | ".join(notes.instructor_lines(course.root, assignment, student.id)))
            for nb, cell in cells:
                row[f"{nb}:{cell}"] = number(scores.get((nb, cell)))
            rows.append(row)
    return header, rows


def export(course, assignment, to, fmt="csv") -> int:
    if fmt not in lms_formats.FORMATS:
        raise GraderError(f"unknown format {fmt!r}; one of {', '.join(lms_formats.FORMATS)}")
    header, rows = export_rows(course, assignment)
    path = Path(to)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        if fmt == "csv":
            writer = csv.DictWriter(fh, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
        else:
            csv.writer(fh).writerows(lms_rows(course, assignment, rows, fmt))
    return len(rows)


def lms_rows(course, assignment, rows, fmt) -> list:
    with course.gradebook() as gb:
        max_score = gb.find_assignment(assignment).max_score
    students = [{"student_id": r["student_id"], "lms_user_id": r["lms_user_id"], "first_name": r["first_name"],
                 "last_name": r["last_name"], "email": r["email"],
                 "score": float(r["score"]) if r.get("submitted") == "yes" and r.get("score") != "" else None}
                for r in rows]
    if fmt == "canvas":
        canvas_id = course.section(LmsExport).canvas_assignment_ids.get(assignment)
        return lms_formats.canvas(assignment, max_score, students, canvas_id)
    return getattr(lms_formats, fmt)(assignment, max_score, students)


def import_roster(course, roster) -> int:
    """Add or update students from a CSV with `id` and optional names, email, `lms_user_id`."""
    allowed = {"first_name", "last_name", "email", "lms_user_id"}
    with open(roster, newline="") as fh, course.gradebook() as gb:
        count = 0
        for record in csv.DictReader(fh):
            if not record.get("id"):
                raise GraderError(f"{roster}: every row needs an 'id' column")
            gb.update_or_create_student(record["id"], **{k: v for k, v in record.items()
                                                       if k in allowed and v})
            count += 1
    return count
