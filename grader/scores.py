"""A student's own score, part by part, released with their feedback.

nbgrader releases feedback under a name only the submitter can compute (a hash of
the submission's secret, which only the student's copy and the course hold). The
scores go beside it the same way: `EXCHANGE/COURSE/feedback/<key>.json`, where the
key is derived from that secret, in a folder nobody can list.
"""

import hashlib
import json
import os
from pathlib import Path

from grader import GraderError
from grader.late import LateRule, assess
from grader.settings import LatePolicy
from grader.state import write_atomic


def score_key(secret: str) -> str:
    return hashlib.sha256(("grader-score:" + secret.strip()).encode()).hexdigest()


def submission_secret(course, assignment, student):
    for folder in ("feedback", "submitted"):
        path = course.path(folder, student, assignment, "submission_secret.txt")
        if path.exists():
            return path.read_text()
    return None


def score_record(gb, rule, assignment, student) -> dict:
    sub = gb.find_submission(assignment, student)
    parts = [{"notebook": nb.name, "part": grade.name, "score": grade.score, "max_score": grade.max_score,
              "needs_manual_grade": bool(grade.needs_manual_grade)}
             for nb in sorted(sub.notebooks, key=lambda n: n.name)
             for grade in sorted(nb.grades, key=lambda g: g.name)]
    penalty = sub.late_submission_penalty or 0.0
    return {"assignment": assignment, "student": student, "parts": parts,
            "raw_score": sub.score, "late_penalty": penalty, "score": max(sub.score - penalty, 0.0),
            "max_score": sub.max_score, "late": assess(gb, rule, assignment, student).describe()}


def publish_scores(course, assignment, students=None) -> int:
    """Release the scores of `assignment` (every student with feedback, or `students`)."""
    from nbgrader.api import MissingEntry

    folder = Path(course.exchange_root) / course.course_id / "feedback"
    if not folder.is_dir():
        raise GraderError(f"no feedback released in {folder}; run `grader feedback {assignment}`")
    rule = LateRule.of(course.section(LatePolicy))
    if students is None:
        students = sorted(p.parent.name for p in course.path("feedback").glob(f"*/{assignment}"))
    count = 0
    with course.gradebook() as gb:
        for student in students:
            secret = submission_secret(course, assignment, student)
            if not secret:
                continue
            try:
                record = score_record(gb, rule, assignment, student)
            except MissingEntry:
                continue
            path = folder / f"{score_key(secret)}.json"
            write_atomic(path, json.dumps(record, indent=1))
            os.chmod(path, 0o644)
            count += 1
    return count


def own_submissions(cache, course_id, assignment, student) -> list:
    """This student's submissions of `assignment` in nbgrader's local cache, newest first."""
    found = [p for p in (Path(cache) / course_id).glob(f"{student}+{assignment}+*")
             if (p / "submission_secret.txt").exists()]
    return sorted(found, key=lambda p: p.name.split("+")[-1], reverse=True)


def my_score(cache, course_id, exchange_root, assignment, student) -> dict:
    """The released score of this student's latest graded submission of `assignment`."""
    folder = Path(exchange_root) / course_id / "feedback"
    submissions = own_submissions(cache, course_id, assignment, student)
    if not submissions:
        raise GraderError(f"no submission of {assignment} from this account here "
                          "(scores are found with the copy `grader submit` keeps)")
    for submission in submissions:
        path = folder / f"{score_key((submission / 'submission_secret.txt').read_text())}.json"
        if path.exists():
            return json.loads(path.read_text())
    raise GraderError(f"no score released for {assignment} yet")
