"""Regrade requests: a student asks for one part to be looked at again, the instructor answers.

Requests travel like nbgrader's submissions, through a folder students can write to
but not list, and are kept from other students by file permissions as well:

    EXCHANGE/COURSE/regrades/inbound/   3733: setgid, sticky, others may only create
        STUDENT+ASSIGNMENT+TIME+TOKEN.json  0640, owned by the student; the folder's
                                        group (the instructor's) is inherited, so the
                                        instructor reads it and no other student can
    EXCHANGE/COURSE/regrades/replies/   0711: the answer, named by the request's TOKEN,
        TOKEN.json                      which only the requester knows

A request carries a proof made from the secret of the student's own submission, so a
request filed in another student's name is shown as unverified. Answers and any
change of points are recorded in the gradebook (a part's manual score) and under
`.grader/regrades/`.
"""

import datetime
import hashlib
import json
import os
import pwd
import secrets
from dataclasses import dataclass
from pathlib import Path

from grader import GraderError
from grader.state import CourseState, write_atomic

INBOUND_MODE = 0o3733
REPLIES_MODE = 0o711
REQUEST_MODE = 0o640
UTC = datetime.timezone.utc


def folders(exchange_root, course_id):
    base = Path(exchange_root) / course_id / "regrades"
    return base / "inbound", base / "replies"


def ensure_request_folders(course) -> None:
    inbound, replies = folders(course.exchange_root, course.course_id)
    for folder, mode in ((inbound, INBOUND_MODE), (replies, REPLIES_MODE)):
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, mode)
    os.chmod(inbound.parent, 0o755)


def proof(secret: str, token: str) -> str:
    return hashlib.sha256(f"grader-regrade:{secret.strip()}:{token}".encode()).hexdigest()


# ---- the student's side ----------------------------------------------------------------

def _own_record(cache, course_id) -> Path:
    return Path(cache) / course_id / "grader-regrade-requests.json"


def file_request(cache, course_id, exchange_root, student, assignment, part, reason) -> str:
    """File a request; returns its short id."""
    from grader.scores import own_submissions

    if not reason.strip():
        raise GraderError("say why: --reason \"...\"")
    inbound, _ = folders(exchange_root, course_id)
    if not inbound.is_dir():
        raise GraderError(f"{course_id} takes no regrade requests yet ({inbound} does not exist)")
    submissions = own_submissions(cache, course_id, assignment, student)
    if not submissions:
        raise GraderError(f"no submission of {assignment} from this account here; "
                          "a request is filed from the account and machine that submitted")
    token = secrets.token_hex(16)
    secret = (submissions[0] / "submission_secret.txt").read_text()
    now = datetime.datetime.now(UTC)
    request = {"student": student, "assignment": assignment, "part": part, "reason": reason.strip(),
               "filed_at": now.isoformat(), "submission": submissions[0].name, "token": token,
               "proof": proof(secret, token)}
    name = f"{student}+{assignment}+{now.strftime('%Y%m%dT%H%M%S')}+{token}.json"
    # created 0640 at once: there is no moment when another account could open it
    fd = os.open(inbound / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, REQUEST_MODE)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), REQUEST_MODE)  # whatever the umask took away or left
        json.dump(request, fh, indent=1)
    record = _own_record(cache, course_id)
    record.parent.mkdir(parents=True, exist_ok=True)
    mine = json.loads(record.read_text()) if record.exists() else []
    mine.append({"token": token, "assignment": assignment, "part": part, "filed_at": request["filed_at"]})
    write_atomic(record, json.dumps(mine, indent=1))
    return token[:8]


def my_requests(cache, course_id, exchange_root, assignment=None) -> list:
    """This student's requests, each with the instructor's reply when there is one."""
    record = _own_record(cache, course_id)
    mine = json.loads(record.read_text()) if record.exists() else []
    _, replies = folders(exchange_root, course_id)
    found = []
    for entry in mine:
        if assignment and entry["assignment"] != assignment:
            continue
        reply = replies / f"{entry['token']}.json"
        found.append({**entry, "id": entry["token"][:8],
                      "reply": json.loads(reply.read_text()) if reply.exists() else None})
    return found


# ---- the instructor's side -------------------------------------------------------------

@dataclass
class Request:
    id: str
    token: str
    student: str
    assignment: str
    part: str
    reason: str
    filed_at: str
    filed_by: str
    verified: bool
    resolution: dict = None
    feedback_rereleased: bool = False  # set by `resolve`: the student's feedback page went out again


def _resolutions(course) -> Path:
    return CourseState(course.root).root / "regrades"


def requests(course, assignment=None) -> list:
    from grader.scores import submission_secret

    inbound, _ = folders(course.exchange_root, course.course_id)
    found = []
    for path in sorted(inbound.glob("*+*+*+*.json")) if inbound.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if assignment and data.get("assignment") != assignment:
            continue
        token = path.stem.split("+")[-1]
        secret = submission_secret(course, data.get("assignment", ""), data.get("student", ""))
        try:
            owner = pwd.getpwuid(path.stat().st_uid).pw_name
        except KeyError:
            owner = str(path.stat().st_uid)
        done = _resolutions(course) / f"{token}.json"
        found.append(Request(
            id=token[:8], token=token, student=data.get("student", ""), assignment=data.get("assignment", ""),
            part=data.get("part", ""), reason=data.get("reason", ""), filed_at=data.get("filed_at", ""),
            filed_by=owner, verified=bool(secret) and data.get("proof") == proof(secret, token),
            resolution=json.loads(done.read_text()) if done.exists() else None))
    return found


def resolve(course, request_id, note, points=None) -> Request:
    """Answer a request; with `points`, the part's score becomes that (a manual score)."""
    matches = [r for r in requests(course) if r.token.startswith(request_id)]
    if len(matches) != 1:
        raise GraderError(f"{'no' if not matches else 'more than one'} regrade request {request_id!r}"
                          " (see `grader regrades`)")
    request = matches[0]
    if not request.verified:
        raise GraderError(f"request {request.id} does not prove it comes from {request.student}'s "
                          "submission; not changing their grade")
    if points is not None:
        _set_points(course, request, points)
    answer = {"id": request.id, "assignment": request.assignment, "part": request.part,
              "note": note, "points": points, "resolved_at": datetime.datetime.now(UTC).isoformat()}
    _resolutions(course).mkdir(parents=True, exist_ok=True)
    write_atomic(_resolutions(course) / f"{request.token}.json", json.dumps(answer, indent=1))
    _, replies = folders(course.exchange_root, course.course_id)
    reply = replies / f"{request.token}.json"
    write_atomic(reply, json.dumps(answer, indent=1))
    os.chmod(reply, 0o644)
    if points is not None:
        from grader.feedback import rerelease
        from grader.scores import publish_scores

        # the feedback page shows the old score until it is generated again
        request.feedback_rereleased = rerelease(course, request.assignment, request.student)
        try:
            publish_scores(course, request.assignment, [request.student])
        except GraderError:
            pass  # feedback not released yet: the new score goes out with it
    request.resolution = answer
    return request


def _set_points(course, request, points) -> None:
    """Put `points` on the request's part and recompute the late penalty on the new score."""
    from grader.late import LateRule, assess
    from grader.settings import LatePolicy

    rule = LateRule.of(course.section(LatePolicy))
    with course.gradebook() as gb:
        sub = gb.find_submission(request.assignment, request.student)
        grades = [g for nb in sub.notebooks for g in nb.grades if g.name == request.part]
        if not grades:
            raise GraderError(f"{request.assignment} has no graded part {request.part!r}")
        grade = grades[0]
        if not 0 <= points <= grade.max_score:
            raise GraderError(f"{request.part} is out of {grade.max_score:g} points")
        grade.manual_score = points
        grade.needs_manual_grade = False
        gb.db.commit()
        fraction = assess(gb, rule, request.assignment, request.student).fraction
        for nb in sub.notebooks:
            nb.late_submission_penalty = nb.score * fraction if fraction else None
        gb.db.commit()
