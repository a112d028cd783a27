"""Late submissions: what lateness costs, and a submission time the student cannot forge.

The policy (`c.LatePolicy`): a grace period, then one rule, `zero`, `none`, `decay`
(`decay_per_day` of the score per day or part of a day late) or `late_days` (the
student's term budget of late days covers whole days first, spent in the order of
the assignments' due dates; the days left over decay). A student's extension is
nbgrader's own (`SubmittedAssignment.extension`), so the seconds late nbgrader hands
the plugin already count from the extended due date.

nbgrader takes the submission time from `timestamp.txt`, which the student's side
writes. The grader checks it against when the submission really arrived in the
exchange (the change time of its directory and of `timestamp.txt`, which cannot be
set back, recorded once at first collection) and grades a forged one as submitted
on arrival.
"""

import datetime
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from nbgrader.plugins.latesubmission import LateSubmissionPlugin
from nbgrader.utils import parse_utc

from grader.settings import LatePolicy

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's own, always UTC


DAY_SECONDS = 24 * 3600


@dataclass(frozen=True)
class LateRule:
    """`c.LatePolicy` as plain values: what students are shown and what grading applies."""

    penalty: str = "zero"
    grace_minutes: float = 0.0
    decay_per_day: float = 0.1
    late_day_budget: int = 0

    @classmethod
    def of(cls, policy: LatePolicy) -> "LateRule":
        return cls(policy.penalty, policy.grace_minutes, policy.decay_per_day, policy.late_day_budget)

    @classmethod
    def from_dict(cls, values: dict) -> "LateRule":
        return cls(**{k: values[k] for k in asdict(cls()) if k in values})

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        grace = f"{self.grace_minutes:g} min of grace, then " if self.grace_minutes else ""
        return grace + {
            "zero": "a late submission scores 0",
            "none": "no penalty (lateness is only reported)",
            "decay": f"{self.decay_per_day:.0%} off per day or part of a day late",
            "late_days": f"{self.late_day_budget} late day(s) for the term cover whole days late, "
                         f"then {self.decay_per_day:.0%} off per day",
        }[self.penalty]


@dataclass(frozen=True)
class LateCharge:
    """What one submission's lateness costs."""

    seconds_late: float
    days_late: int          # started days past the (extended) due date, 0 within the grace period
    late_days_used: int     # of the student's budget, on this submission
    fraction: float         # share of the score taken away

    def describe(self) -> str:
        if self.seconds_late <= 0:
            return "on time"
        if self.days_late == 0:
            return f"{self.seconds_late / 60:.0f} min late, within the grace period: no penalty"
        parts = [f"{self.days_late} day(s) late"]
        if self.late_days_used:
            parts.append(f"{self.late_days_used} late day(s) used")
        parts.append(f"{self.fraction:.0%} off" if self.fraction else "no penalty")
        return ": ".join([parts[0], ", ".join(parts[1:])])


def days_late(rule: LateRule, seconds_late: float) -> int:
    if seconds_late <= rule.grace_minutes * 60:
        return 0
    return math.ceil(seconds_late / DAY_SECONDS)


def charge(rule: LateRule, seconds_late: float, late_days_available: int = 0) -> LateCharge:
    """The cost of being `seconds_late` (past any extension) under `rule`, with
    `late_days_available` left in the student's budget before this submission."""
    seconds_late = max(0.0, float(seconds_late or 0))
    days = days_late(rule, seconds_late)
    used, fraction = 0, 0.0
    if days and rule.penalty == "zero":
        fraction = 1.0
    elif days and rule.penalty == "decay":
        fraction = min(1.0, days * rule.decay_per_day)
    elif days and rule.penalty == "late_days":
        used = min(days, max(0, late_days_available))
        fraction = min(1.0, (days - used) * rule.decay_per_day)
    return LateCharge(seconds_late, days, used, round(fraction, 6))


def late_days_spent(gb, rule: LateRule, student: str, before=None) -> dict:
    """{assignment: late days used} of `student`, in due-date order, stopping at `before`.

    Spent in due-date order whatever order the assignments are graded in, so regrading
    an early assignment never takes days from a later one's past grading by surprise.
    """
    from nbgrader.api import MissingEntry

    spent = {}
    if rule.penalty != "late_days":
        return spent
    for assignment in gb.assignments:  # nbgrader orders them by due date, then name
        if assignment.name == before:
            break
        try:
            sub = gb.find_submission(assignment.name, student)
        except MissingEntry:
            continue
        used = charge(rule, sub.total_seconds_late, rule.late_day_budget - sum(spent.values())).late_days_used
        if used:
            spent[assignment.name] = used
    return spent


def assess(gb, rule: LateRule, assignment: str, student: str) -> LateCharge:
    """The charge of `student`'s graded submission of `assignment`, as grading applies it."""
    sub = gb.find_submission(assignment, student)
    before = sum(late_days_spent(gb, rule, student, before=assignment).values())
    return charge(rule, sub.total_seconds_late, rule.late_day_budget - before)


class GraceLatePenalty(LateSubmissionPlugin):
    """nbgrader's late-penalty plugin applying `c.LatePolicy` (see the module's doc).

    nbgrader calls it once per notebook with that notebook's score; the share taken is
    the same for every notebook of the submission.
    """

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        rule = LateRule.of(LatePolicy(config=self.config))
        available = rule.late_day_budget
        # nbgrader's AssignLatePenalties is the parent: its open gradebook and assignment
        # tell which late days this student already spent on assignments due earlier
        gb = getattr(self.parent, "gradebook", None)
        assignment = getattr(self.parent, "assignment_id", None)
        if rule.penalty == "late_days" and gb is not None and assignment:
            available -= sum(late_days_spent(gb, rule, student_id, before=assignment).values())
        cost = charge(rule, total_seconds_late, available)
        self.log.info("%s: %s", student_id, cost.describe())
        return score * cost.fraction if cost.fraction else None


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
