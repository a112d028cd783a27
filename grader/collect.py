"""`grader collect ASSIGNMENT`: nbgrader's collect, plus an archive of every submission.

nbgrader keeps only each student's latest submission in `submitted/`. Every
submission found in the exchange is also copied, once, to
`archive/ASSIGNMENT/STUDENT/<exchange name>/` with `arrival.json` (when it arrived,
when it was collected, what it claimed), and the collected copy's `timestamp.txt`
is replaced by the arrival time when the claim is forged.
"""

import datetime
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from grader import GraderError, notes
from grader.late import arrival_time, format_utc, judge_timestamp, name_timestamp, parse_timestamp
from grader.settings import LatePolicy

ARCHIVE = "archive"


@dataclass
class CollectReport:
    assignment: str
    students: list = field(default_factory=list)
    archived: int = 0
    forged: list = field(default_factory=list)


def _inbound(course) -> Path:
    return Path(course.exchange_root) / course.course_id / "inbound"


def archive_submissions(course, assignment) -> int:
    """Copy every not-yet-archived submission of `assignment` from the exchange; return how many."""
    count = 0
    for src in sorted(_inbound(course).glob(f"*+{assignment}+*")):
        student = src.name.split("+")[0]
        dest = course.path(ARCHIVE, assignment, student, src.name)
        if dest.exists():
            continue
        claimed = (src / "timestamp.txt").read_text() if (src / "timestamp.txt").exists() else None
        record = {
            "arrived_at": format_utc(arrival_time(src)),
            "collected_at": format_utc(datetime.datetime.now(datetime.timezone.utc)),
            "claimed": claimed,
            "exchange_name": src.name,
        }
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp / "files")
        (tmp / "arrival.json").write_text(json.dumps(record, indent=1))
        os.replace(tmp, dest)
        count += 1
    return count


def _archived_record(course, assignment, student, claimed):
    """The archive entry of the submission now in `submitted/` (nbgrader took the latest)."""
    entries = sorted(course.path(ARCHIVE, assignment, student).glob("*+*"),
                     key=lambda p: name_timestamp(p.name) or datetime.datetime.min.replace(
                         tzinfo=datetime.timezone.utc))
    return entries[-1] if entries else None


def verify_timestamp(course, assignment, student, tolerance):
    """Check the collected submission's claimed time; rewrite it when forged. Returns the note."""
    folder = course.path("submitted", student, assignment)
    stamp_file = folder / "timestamp.txt"
    claimed = stamp_file.read_text() if stamp_file.exists() else None
    entry = _archived_record(course, assignment, student, claimed)
    if entry is None:
        return None
    record = json.loads((entry / "arrival.json").read_text())
    arrived = parse_timestamp(record["arrived_at"])
    original = record["claimed"]
    trusted, note = judge_timestamp(original, name_timestamp(entry.name), arrived, tolerance)
    if note:
        stamp_file.write_text(format_utc(trusted))
    notes.record(course.root, assignment, student, "timestamp", [note] if note else [])
    return note


def collect(course, assignment, log) -> CollectReport:
    report = CollectReport(assignment=assignment)
    if not _inbound(course).is_dir():
        raise GraderError(f"the exchange has no inbound folder for {course.course_id!r} "
                          f"({_inbound(course)}); release an assignment first")
    report.archived = archive_submissions(course, assignment)
    result = course.api().collect(assignment, update=True)
    if not result.get("success"):
        raise GraderError(f"nbgrader collect failed:\n{result.get('log', '')}{result.get('error', '')}")
    tolerance = course.section(LatePolicy).clock_tolerance_seconds
    for folder in sorted(course.path("submitted").glob(f"*/{assignment}")):
        student = folder.parent.name
        report.students.append(student)
        note = verify_timestamp(course, assignment, student, tolerance)
        if note:
            report.forged.append(student)
            log.warning("%s: %s", student, note)
    return report
