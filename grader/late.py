"""Late submissions: a grace period, and a submission time the student cannot forge.

nbgrader takes the submission time from `timestamp.txt`, which the student's side
writes. The grader checks it against when the submission really arrived in the
exchange (the change time of its directory and of `timestamp.txt`, which cannot be
set back, recorded once at first collection) and grades a forged one as submitted
on arrival.
"""

import datetime
import os
from pathlib import Path

from nbgrader.plugins.latesubmission import LateSubmissionPlugin
from nbgrader.utils import parse_utc

from grader.settings import LatePolicy

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's own, always UTC


class GraceLatePenalty(LateSubmissionPlugin):
    """nbgrader's late-penalty plugin with `c.LatePolicy.grace_minutes` of forgiveness."""

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        policy = LatePolicy(config=self.config)
        if total_seconds_late <= policy.grace_minutes * 60:
            self.log.info("%s is %.0f s late, within the grace period", student_id, total_seconds_late)
            return None
        if policy.penalty == "zero":
            return score
        return None


def format_utc(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


def arrival_time(inbound_dir: Path) -> datetime.datetime:
    """When a submission reached the exchange: the latest change to it (ctime cannot be faked)."""
    stamps = []
    for path in [inbound_dir, inbound_dir / "timestamp.txt"]:
        if path.exists():
            st = os.stat(path)
            stamps += [st.st_mtime, st.st_ctime]
    return datetime.datetime.fromtimestamp(max(stamps), tz=datetime.timezone.utc)


def name_timestamp(inbound_name: str):
    """The time nbgrader's submit put into the submission's name (`student+ps1+TIME+random`)."""
    parts = inbound_name.split("+")
    return parse_timestamp(parts[2]) if len(parts) >= 3 else None


def parse_timestamp(text):
    """A UTC datetime from nbgrader's timestamp text, or None."""
    try:
        return parse_utc(text.strip()).replace(tzinfo=datetime.timezone.utc)
    except Exception:  # noqa: BLE001 - anything unparsable is simply "no claim"
        return None


def judge_timestamp(claimed_text, named, arrived, tolerance_seconds):
    """(trusted time, note or None) for a submission claiming `claimed_text`."""
    claimed = parse_timestamp(claimed_text) if claimed_text else None
    tol = datetime.timedelta(seconds=tolerance_seconds)
    if claimed is None:
        return arrived, f"timestamp.txt is missing or unreadable; graded as submitted on arrival, {format_utc(arrived)}"
    problems = []
    if named is not None and abs(claimed - named) > tol:
        problems.append(f"it differs from the submission's own record ({format_utc(named)})")
    if claimed < arrived - tol:
        problems.append(f"the submission only arrived at {format_utc(arrived)}")
    if problems:
        return arrived, (f"FORGED TIMESTAMP: timestamp.txt says {format_utc(claimed)} but "
                         + " and ".join(problems) + f"; graded as submitted at {format_utc(arrived)}")
    return claimed, None
