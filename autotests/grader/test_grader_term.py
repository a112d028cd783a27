"""A term: extensions, late-day budgets and penalty rules, what students are shown, grades
out to the LMSs, scores and regrade requests.

The rules are checked where nbgrader applies them (its `AssignLatePenalties` with the
course's plugin, on a real gradebook); one class of two goes through the command line
from release to a resolved regrade request.
"""

import csv
import datetime
import io
import os
import stat
import sys

import nbformat
import pytest

from grader_testkit import FIXTURES, REPO, grader, grader_inprocess

sys.path.insert(0, str(REPO))
from grader.late import LateRule, charge  # noqa: E402

UTC = datetime.timezone.utc
DUE = datetime.datetime(2026, 3, 1, 12, 0)  # the gradebook's naive UTC
HOUR, DAY = 3600, 86400


# ---- each rule's arithmetic ------------------------------------------------------------

@pytest.mark.parametrize("rule, seconds, available, days, used, fraction", [
    (LateRule("zero", 15), 10 * 60, 0, 0, 0, 0.0),            # within the grace period
    (LateRule("zero", 15), 16 * 60, 0, 1, 0, 1.0),
    (LateRule("none", 0), 5 * DAY, 0, 5, 0, 0.0),
    (LateRule("decay", 0, 0.1), 1, 0, 1, 0, 0.1),              # a part of a day is a day
    (LateRule("decay", 0, 0.1), 2 * DAY + 1, 0, 3, 0, 0.3),
    (LateRule("decay", 0, 0.3), 4 * DAY, 0, 4, 0, 1.0),        # never more than the score
    (LateRule("late_days", 0, 0.25, 3), 2 * DAY, 3, 2, 2, 0.0),
    (LateRule("late_days", 0, 0.25, 3), 3 * DAY, 1, 3, 1, 0.5),
    (LateRule("late_days", 0, 0.25, 3), 1 * HOUR, 0, 1, 0, 0.25),
])
def test_each_rule_costs_what_it_says(rule, seconds, available, days, used, fraction):
    cost = charge(rule, seconds, available)
    assert (cost.days_late, cost.late_days_used, cost.fraction) == (days, used, fraction)


# ---- applied by nbgrader, on a gradebook ------------------------------------------------

@pytest.fixture
def course(tmp_path, monkeypatch):
    from grader.cli import _tools_on_path
    from grader.course import init_course

    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    _tools_on_path()  # nbgrader's gradebook runs `alembic`
    monkeypatch.setenv("HOME", str(tmp_path))
    return init_course(tmp_path / "c", "c1", exchange=tmp_path / "x")


def with_policy(course, **policy):
    from grader.course import load_course

    config = course.root / "nbgrader_config.py"
    config.write_text(config.read_text() + "".join(f"\nc.LatePolicy.{k} = {v!r}" for k, v in policy.items()))
    return load_course(course.root)


def add_assignment(course, name, due, points=10.0):
    with course.gradebook() as gb:
        gb.update_or_create_assignment(name, duedate=due)
        gb.add_notebook(name, name)
        gb.add_grade_cell("part", name, name, max_score=points, cell_type="code")


def submit_graded(course, name, student, submitted_at, score):
    """A graded submission, then nbgrader's own late-penalty step with the course's config."""
    from nbgrader.preprocessors import AssignLatePenalties

    with course.gradebook() as gb:
        gb.update_or_create_student(student)
        gb.update_or_create_submission(name, student, timestamp=submitted_at)
        grade = gb.find_grade("part", name, name, student)
        grade.auto_score = score
        gb.db.commit()
    resources = {"nbgrader": {"notebook": name, "assignment": name, "student": student,
                              "db_url": course.db_url}}
    AssignLatePenalties(config=course.merged()).preprocess(nbformat.v4.new_notebook(), resources)
    with course.gradebook() as gb:
        return gb.find_submission(name, student).late_submission_penalty


def test_an_extension_makes_a_late_submission_on_time(course):
    from grader.term import extensions, grant_extension, parse_duration

    course = with_policy(course, penalty="zero", grace_minutes=0)
    add_assignment(course, "hw1", DUE)
    grant_extension(course, "hw1", "ada", parse_duration("2d"))  # before ada submits
    assert extensions(course, "hw1") == {"ada": datetime.timedelta(days=2)}
    assert submit_graded(course, "hw1", "ada", DUE + datetime.timedelta(days=1, hours=23), 8.0) == 0
    assert submit_graded(course, "hw1", "bob", DUE + datetime.timedelta(days=1, hours=23), 8.0) == 8.0
    with course.gradebook() as gb:  # autograde's later timestamp kept the extension
        assert gb.find_submission("hw1", "ada").extension == datetime.timedelta(days=2)


@pytest.mark.parametrize("order", [("hw1", "hw2"), ("hw2", "hw1")])
def test_late_days_are_spent_in_due_order_then_decay(course, order):
    course = with_policy(course, penalty="late_days", late_day_budget=3, decay_per_day=0.25, grace_minutes=0)
    add_assignment(course, "hw1", DUE)
    add_assignment(course, "hw2", DUE + datetime.timedelta(days=7))
    late = {"hw1": DUE + datetime.timedelta(days=1, hours=2),                 # 2 days: both covered
            "hw2": DUE + datetime.timedelta(days=7 + 2, hours=5)}              # 3 days: 1 covered, 2 decay
    penalties = {name: submit_graded(course, name, "ada", late[name], 10.0) for name in order}
    if order[0] == "hw2":  # graded before hw1 was: hw1's days are counted once it is
        penalties["hw2"] = submit_graded(course, "hw2", "ada", late["hw2"], 10.0)
    assert penalties == {"hw1": 0, "hw2": 5.0}

    from grader.term import term_record
    _, students = term_record(course)
    assert students["ada"]["late_days_used"] == {"hw1": 2, "hw2": 1}
    assert students["ada"]["late_days_left"] == 0


def test_decay_is_applied_per_day(course):
    course = with_policy(course, penalty="decay", decay_per_day=0.1, grace_minutes=15)
    add_assignment(course, "hw1", DUE)
    assert submit_graded(course, "hw1", "ada", DUE + datetime.timedelta(minutes=10), 10.0) == 0
    assert submit_graded(course, "hw1", "bob", DUE + datetime.timedelta(days=2, minutes=1), 10.0) == \
        pytest.approx(3.0)


@pytest.mark.parametrize("penalty", ["zero", "late_days"])
def test_an_extension_without_a_submission_is_exported_as_not_submitted(course, tmp_path, penalty):
    """nbgrader keeps an extension on a submission row, so one granted before the student
    submits makes a row with no timestamp and a score of 0: every export must read it as
    "not submitted" (no score), never as a zero, with or without a late penalty."""
    from grader.export import export, export_rows
    from grader.term import grant_extension, parse_duration

    course = with_policy(course, penalty=penalty, late_day_budget=2, decay_per_day=0.5, grace_minutes=0)
    add_assignment(course, "hw1", DUE)
    grant_extension(course, "hw1", "cyd", parse_duration("2d"))
    assert submit_graded(course, "hw1", "ada", DUE + datetime.timedelta(days=1), 8.0) == \
        (8.0 if penalty == "zero" else 0)
    with course.gradebook() as gb:  # the premise: nbgrader made cyd a submission scored 0
        row = gb.find_submission("hw1", "cyd")
        assert (row.timestamp, row.score, row.extension) == (None, 0, datetime.timedelta(days=2))

    _, rows = export_rows(course, "hw1")
    rows = {row["student_id"]: row for row in rows}
    assert rows["cyd"]["submitted"] == "no" and rows["cyd"]["extension"] == "2d"
    for column in ("score", "raw_score", "late_penalty", "days_late", "late_days_used", "late_policy"):
        assert rows["cyd"].get(column, "") == "", (column, rows["cyd"])
    assert rows["ada"]["submitted"] == "yes" and rows["ada"]["score"] == ("0" if penalty == "zero" else "8")

    scores = {}
    for fmt, column in (("canvas", -1), ("moodle", -1), ("gradescope", 3)):
        export(course, "hw1", tmp_path / f"{fmt}.csv", fmt)
        table = read_csv(tmp_path / f"{fmt}.csv")
        body = [r for r in table[1:] if r[0] != "Points Possible"]
        scores[fmt] = [r[column] for r in body]
        assert len(body) == 2
    # rows are ada's then cyd's; cyd's score is empty, which each LMS imports as "no change"
    assert all(found[1] == "" and found[0] != "" for found in scores.values()), scores
    assert read_csv(tmp_path / "gradescope.csv")[2][4] == ""  # nor any Max Points for her

    # collected but not autograded yet: still no score, though said to be submitted
    (course.path("submitted", "cyd", "hw1")).mkdir(parents=True)
    _, rows = export_rows(course, "hw1")
    cyd = next(row for row in rows if row["student_id"] == "cyd")
    assert cyd["submitted"] == "yes, not graded yet" and cyd.get("score", "") == ""
    export(course, "hw1", tmp_path / "canvas.csv", "canvas")
    assert read_csv(tmp_path / "canvas.csv")[3][-1] == ""


# ---- a term of three assignments for a class of thirty ---------------------------------

H, D = datetime.timedelta(hours=1), datetime.timedelta(days=1)
# profile: {assignment: (submitted this long after its due date, raw score, extension)}
TERM = {
    "ontime": {"hw1": (-H, 10, None), "hw2": (-H, 9, None), "hw3": (-H, 8, None)},
    "extended": {"hw1": (D + 23 * H, 10, D * 2), "hw2": (-H, 10, None), "hw3": (-H, 10, None)},
    "within": {"hw1": (20 * H, 10, None), "hw2": (D + 2 * H, 10, None), "hw3": (-H, 10, None)},
    "runsout": {"hw1": (D + H, 10, None), "hw2": (2 * D + 3 * H, 8, None), "hw3": (3 * H, 10, None)},
    "beyond": {"hw1": (-H, 6, None), "hw2": (3 * D - H, 10, D), "hw3": (D + H, 6, None)},
    "hours": {"hw1": (5 * H, 10, None), "hw2": (25 * H, 10, None), "hw3": (datetime.timedelta(minutes=1), 10, None)},
}
# worked out by hand for a budget of 3 late days, then 25% per day: {profile: ([(score, penalty)
# of hw1, hw2, hw3], late days left)}
# - within: 1 + 2 days, all covered; runsout: 2 covered, then 1 of 3 covered and 2 days decay
#   (50% of 8), then 1 day with none left (25% of 10);
# - beyond: 2 days past a 1-day extension covered, then 1 of 2 covered and 1 day decays (25% of 6);
# - hours: 5 h and 25 h late are 1 and 2 started days, covered; a minute late then costs 25%.
EXPECTED = {
    "ontime": ([(10, 0), (9, 0), (8, 0)], 3),
    "extended": ([(10, 0), (10, 0), (10, 0)], 3),
    "within": ([(10, 0), (10, 0), (10, 0)], 0),
    "runsout": ([(10, 0), (4, 4), (7.5, 2.5)], 0),
    "beyond": ([(6, 0), (10, 0), (4.5, 1.5)], 0),
    "hours": ([(10, 0), (10, 0), (7.5, 2.5)], 0),
}


def test_a_term_of_thirty_exports_the_hand_worked_grades(course):
    from grader.export import export_rows
    from grader.term import grant_extension

    course = with_policy(course, penalty="late_days", late_day_budget=3, decay_per_day=0.25, grace_minutes=0)
    dues = {"hw1": DUE, "hw2": DUE + 7 * D, "hw3": DUE + 14 * D}
    for name, due in dues.items():
        add_assignment(course, name, due)
    students = {f"{profile}{i}": profile for profile in TERM for i in range(5)}
    for name, due in dues.items():  # graded as a term goes, each assignment after its due date
        for student, profile in students.items():
            after, raw, extension = TERM[profile][name]
            if extension:
                grant_extension(course, name, student, extension)
            submit_graded(course, name, student, due + after, float(raw))
    got = {}
    for index, name in enumerate(dues):
        _, rows = export_rows(course, name)
        for row in rows:
            got.setdefault(row["student_id"], ([], row["late_days_left"]))[0].append(
                (float(row["score"]), float(row["late_penalty"])))
    assert len(got) == 30
    for student, profile in students.items():
        scores, left = EXPECTED[profile]
        assert got[student] == (scores, str(left)), f"{student}: {got[student]}, worked out {EXPECTED[profile]}"


# ---- a class of two through the command line -------------------------------------------

def test_a_term_through_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    home, root, exchange = tmp_path / "home", tmp_path / "c", tmp_path / "x"
    home.mkdir()
    grader(["init", root, "--course-id", "c1", "--exchange", exchange], tmp_path, home)
    config = root / "nbgrader_config.py"
    # the sandbox is tested elsewhere; this course's own fixture runs unconfined
    config.write_text(config.read_text() + '\nc.Sandbox.mode = "none"\nc.LatePolicy.penalty = "late_days"\n'
                      "c.LatePolicy.late_day_budget = 2\nc.LatePolicy.decay_per_day = 0.5\n"
                      "c.LatePolicy.grace_minutes = 0\n")
    (root / "source" / "ps1").mkdir(parents=True)
    (root / "source" / "ps1" / "ps1.ipynb").write_text((FIXTURES / "ps1" / "ps1.ipynb").read_text())
    (tmp_path / "roster.csv").write_text("id,first_name,last_name,email,lms_user_id\n"
                                         "ada,Ada,Lovelace,ada@uni.edu,101\nbob,Bob,Babbage,bob@uni.edu,102\n")
    instructor = lambda *args: grader_inprocess(list(args), root, home)  # noqa: E731
    instructor("roster", tmp_path / "roster.csv")
    grader(["generate", "ps1", "--due", "2026-07-01T16:00:00+00:00", "--no-proof"], root, home)
    instructor("release", "ps1")
    assert "ada" in instructor("extend", "ps1", "ada", "2d").stdout
    assert "ada" in instructor("extend", "ps1").stdout and "1 extension(s)" in instructor("extend", "ps1").stdout

    students = {}
    for name in ("ada", "bob"):
        students[name] = (tmp_path / name, tmp_path / f"home-{name}")
        for folder in students[name]:
            folder.mkdir()

    def student(name, *args):
        work, own_home = students[name]
        return grader_inprocess([*args, "--course-id", "c1", "--exchange", exchange, "--student", name],
                                work, own_home)

    fetched = student("ada", "fetch", "ps1").stdout
    assert "due Wed 01 Jul 2026 12:00 EDT (America/New_York)" in fetched
    assert "your extension: 2d, so due Fri 03 Jul 2026 12:00 EDT" in fetched
    assert "late days left: 2 of 2" in fetched
    assert "your extension" not in student("bob", "fetch", "ps1").stdout
    listed = student("ada", "list").stdout
    assert listed.startswith("ps1 fetched\n") and "your extension: 2d" in listed
    missing = grader_inprocess(["list", "ps9", "--course-id", "c1", "--exchange", exchange, "--student", "bob"],
                               *students["bob"], check=False)
    assert missing.returncode == 1 and "ps9 is not released in c1" in missing.stderr

    due = datetime.datetime.now(UTC) - datetime.timedelta(hours=3)
    instructor("due", "ps1", due.isoformat())
    validated = grader_inprocess(["validate", "ps1", "--course-id", "c1", "--exchange", exchange,
                                  "--student", "bob"], *students["bob"], check=False).stdout
    from zoneinfo import ZoneInfo
    expected = due.astimezone(ZoneInfo("America/New_York")).strftime("%a %d %b %Y %H:%M %Z")
    assert f"due {expected} (America/New_York)" in validated and "late days left: 2 of 2" in validated

    for name in ("ada", "bob"):
        nb = nbformat.read(str(students[name][0] / "ps1" / "ps1.ipynb"), as_version=4)
        from simulated_class import solved
        nbformat.write(solved(nb), str(students[name][0] / "ps1" / "ps1.ipynb"))
    assert "late" not in student("ada", "submit", "ps1").stdout  # inside her extension
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))  # at a terminal, a late submit asks first
    declined = grader_inprocess(["submit", "ps1", "--course-id", "c1", "--exchange", exchange, "--student", "bob"],
                                *students["bob"], check=False)
    assert declined.returncode == 1 and "ps1 not submitted" in declined.stderr
    assert not list((exchange / "c1" / "inbound").glob("bob+*"))
    assert student("bob", "submit", "ps1", "--yes").returncode == 0  # --yes: no question
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    submitted = student("bob", "submit", "ps1").stdout  # not a terminal: it goes, and says so first
    assert "this submission is 3h late: 1 day(s) late: 1 late day(s) used, no penalty (1 late day(s) left after it)" \
        in submitted and submitted.index("late") < submitted.index("submitted ps1")

    instructor("collect", "ps1")
    instructor("autograde", "ps1")
    from grader_testkit import gradebook_scores
    scores = gradebook_scores(root, "ps1")
    assert scores["ada"]["_seconds_late"] == 0 and scores["bob"]["_seconds_late"] > 3 * HOUR - 120
    assert scores["ada"]["_penalty"] == scores["bob"]["_penalty"] == 0
    assert "late days used: ps1 1; left 1" in instructor("term").stdout

    check_exports(instructor, root, scores)
    check_scores_and_regrades(instructor, student, root, exchange, students)


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def check_exports(instructor, root, scores):
    instructor("export", "ps1", "--to", root / "grades.csv")
    with open(root / "grades.csv", newline="") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    assert rows["ada"]["extension"] == "2d" and rows["ada"]["late_policy"] == "on time"
    assert (rows["bob"]["days_late"], rows["bob"]["late_days_used"], rows["bob"]["late_days_left"]) == ("1", "1", "1")
    assert rows["bob"]["late_policy"] == "1 day(s) late: 1 late day(s) used, no penalty"
    total = {name: scores[name]["_raw"] - scores[name]["_penalty"] for name in ("ada", "bob")}

    instructor("export", "ps1", "--format", "canvas", "--to", root / "canvas.csv")
    canvas = read_csv(root / "canvas.csv")
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1"]
    assert canvas[1] == ["Points Possible", "", "", "", "", "7"]
    assert canvas[2] == ["Lovelace, Ada", "101", "", "ada", "", f"{total['ada']:g}"]
    assert canvas[3][3:] == ["bob", "", f"{total['bob']:g}"]

    instructor("export", "ps1", "--format", "moodle", "--to", root / "moodle.csv")
    moodle = read_csv(root / "moodle.csv")
    assert moodle[0] == ["First name", "Last name", "ID number", "Institution", "Department", "Email address", "ps1"]
    assert moodle[1] == ["Ada", "Lovelace", "101", "", "", "ada@uni.edu", f"{total['ada']:g}"]

    instructor("export", "ps1", "--format", "gradescope", "--to", root / "gradescope.csv")
    gradescope = read_csv(root / "gradescope.csv")
    assert gradescope[0] == ["Name", "SID", "Email", "Total Score", "Max Points"]
    assert gradescope[2] == ["Bob Babbage", "102", "bob@uni.edu", f"{total['bob']:g}", "7"]


def check_scores_and_regrades(instructor, student, root, exchange, students):
    assert "scores released to 2 student(s)" in instructor("feedback", "ps1").stdout
    shown = student("ada", "score", "ps1").stdout
    assert "ps1:explain" in shown and "(not graded yet)" in shown and "ps1: 5/7" in shown

    filed = student("ada", "regrade", "ps1", "--part", "explain", "--reason", "my answer is right").stdout
    rid = filed.split("request ")[1].split()[0]
    inbound = exchange / "c1" / "regrades" / "inbound"
    assert stat.S_IMODE(inbound.stat().st_mode) == 0o3733  # others may create, never list
    (request,) = inbound.iterdir()
    assert stat.S_IMODE(request.stat().st_mode) == 0o640  # the instructor's group reads; no other student
    assert request.stat().st_gid == inbound.stat().st_gid
    assert len(request.stem.split("+")[-1]) == 32  # the reply's name is this token, known to ada alone

    listed = instructor("regrades").stdout
    assert f"{rid} ada" in listed and "UNVERIFIED" not in listed and "1 open" in listed
    assert "ps1 submitted: feedback ready to be fetched" in student("ada", "list").stdout
    student("ada", "fetch-feedback", "ps1")
    assert "ps1 submitted: feedback fetched\n" in student("ada", "list").stdout
    assert not nbgrader_feedback_updated(students["ada"], exchange, "ada")
    resolved = instructor("regrades", "resolve", rid, "--points", "2", "--note", "agreed").stdout
    assert "feedback of ps1 released again to ada" in resolved
    # the page now shows the new score: nbgrader's own list sees it differ from ada's copy
    assert nbgrader_feedback_updated(students["ada"], exchange, "ada") == [
        "c1 ada ps1 {} (feedback ready to be fetched)"]
    changed = student("ada", "list", "ps1").stdout
    assert "ps1 submitted: feedback changed since you fetched it" in changed and "due " in changed
    assert "feedback changed" not in student("bob", "list").stdout
    student("ada", "fetch-feedback", "ps1")
    assert "ps1 submitted: feedback fetched\n" in student("ada", "list").stdout
    from grader_testkit import gradebook_scores
    assert gradebook_scores(root, "ps1")["ada"]["explain"] == 2
    shown = student("ada", "score", "ps1").stdout
    assert "ps1: 7/7" in shown and f"regrade request {rid} on explain: answered: agreed (2 point(s))" in shown
    assert "regrade request" not in student("bob", "score", "ps1").stdout
    assert "0 open" in instructor("regrades").stdout


def nbgrader_feedback_updated(student_dirs, exchange, name):
    """nbgrader's ExchangeList over the student's cached submissions, as the Assignments
    panel lists them: the line nbgrader prints for each whose feedback it finds updated."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.list import ExchangeList
    from grader.course import student_config

    work, home = student_dirs
    saved_home, saved_cwd = os.environ["HOME"], os.getcwd()
    os.environ["HOME"] = str(home)
    os.chdir(work)
    try:
        cfg = student_config("c1", exchange, name)
        cfg.ExchangeList.cached = True
        lister = ExchangeList(coursedir=CourseDirectory(config=cfg), authenticator=Authenticator(config=cfg),
                              config=cfg)
        found = [info for entry in lister.start() for info in entry["submissions"]]
        return [lister.format_inbound_assignment(info).replace(info["timestamp"], "{}")
                for info in found if info["feedback_updated"]]
    finally:
        os.environ["HOME"] = saved_home
        os.chdir(saved_cwd)
