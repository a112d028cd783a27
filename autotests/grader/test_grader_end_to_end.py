"""The whole flow through the command line and nbgrader's real exchange: a simulated
class of correct, partial, hostile and broken submissions, graded in bubblewrap."""

import csv
import datetime
import os
import shutil
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from grader_testkit import (FIXTURES, REPO, environment, forget_grades, gradebook_scores, grader,
                            grader_inprocess, require_bwrap, run_once, tree_hashes)
from simulated_class import LATE, ON_TIME, write_submission

pytestmark = pytest.mark.slow
COURSE_ID = "dlsys"
# what autograde may write in the course folder; everything else must stay byte-identical
GRADER_OUTPUTS = ("autograded", "gradebook.db", ".grader")


class Class:
    """The simulated course: folders, and what each step left behind."""

    def __init__(self, root):
        self.root = root
        self.home = root / "home"
        self.exchange = root / "exchange"
        self.course = root / "course"
        self.students = root / "home" / "students"
        self.out = {}

    def run(self, *args, cwd=None, check=True, timeout=600):
        return grader(args, cwd or self.course, self.home, check=check, timeout=timeout)

    def student(self, name, *args, check=True):
        # each student works in their own home, as on a real hub (nbgrader keeps a
        # per-home cache of submissions, which fetch-feedback matches against)
        folder = self.students / name
        folder.mkdir(parents=True, exist_ok=True)
        return grader_inprocess([*args, "--course-id", COURSE_ID, "--exchange", self.exchange,
                                 "--student", name], folder, folder, check=check)

    def snapshot(self):
        return {"course": tree_hashes(self.course, skip=GRADER_OUTPUTS),
                "exchange": tree_hashes(self.exchange), "home": tree_hashes(self.home)}


def _configure(klass):
    with open(klass.course / "nbgrader_config.py", "a") as fh:
        fh.write("\n# test settings: short limits so hostile submissions end quickly\n"
                 "c.Execute.timeout = 5\nc.Sandbox.memory_mb = 1024\nc.Sandbox.max_processes = 48\n"
                 "c.Sandbox.notebook_budget = 120\nc.LatePolicy.grace_minutes = 0\n"
                 "c.ExchangeCollect.check_owner = False\n")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_bwrap()
    return run_once(tmp_path_factory, "grader-end-to-end", lambda: simulate_class(tmp_path_factory))


def simulate_class(tmp_path_factory):
    klass = Class(tmp_path_factory.mktemp("class"))
    klass.home.mkdir()
    out = klass.out
    out["init"] = klass.run("init", klass.course, "--course-id", COURSE_ID, "--exchange", klass.exchange,
                            cwd=klass.root)
    _configure(klass)
    (klass.course / "source" / "ps1").mkdir(parents=True)
    shutil.copy(FIXTURES / "ps1" / "ps1.ipynb", klass.course / "source" / "ps1" / "ps1.ipynb")
    roster = klass.root / "roster.csv"
    names = list(ON_TIME) + list(LATE)
    roster.write_text("id,first_name,lms_user_id\n" + "".join(f"{n},{n.title()},lms-{i:03d}\n"
                                                               for i, n in enumerate(names)))
    klass.run("roster", roster)
    tomorrow = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).isoformat()
    out["generate"] = klass.run("generate", "ps1", "--due", tomorrow)
    out["release"] = klass.run("release", "ps1")

    snoop = {"read": [str(klass.course / "gradebook.db"), str(klass.course / "source" / "ps1" / "ps1.ipynb"),
                      str(klass.course), str(klass.exchange), str(klass.exchange / COURSE_ID / "inbound"),
                      str(klass.course / "submitted" / "correct" / "ps1" / "ps1.ipynb"),
                      str(klass.home), str(klass.students / "correct" / "ps1" / "ps1.ipynb"),
                      str(REPO / "grader"), str(REPO / "autotests")],
             "write": [str(klass.course / "pwned.txt"), str(klass.exchange / "pwned.txt"),
                       str(klass.home / "pwned.txt"), "/grader-sandbox/pwned.txt"]}
    out["snoop_paths"] = snoop

    def submit(name, make):
        klass.student(name, "fetch", "ps1")
        write_submission(make, klass.students / name / "ps1" / "ps1.ipynb", snoop)
        return klass.student(name, "submit", "ps1")

    for name, (make, _) in ON_TIME.items():
        submit(name, make)
    for name in ("correct", "blank"):
        out[f"validate_{name}"] = grader_inprocess(["validate", "ps1"], klass.students / name,
                                                   klass.students / name, check=False)

    # before the due date, solutions are refused and cannot be fetched
    out["solutions_early"] = klass.run("solutions", "ps1", check=False)
    out["fetch_solutions_early"] = klass.student("correct", "fetch-solutions", "ps1", check=False)

    klass.run("due", "ps1", "now")
    time.sleep(2)
    for name, (make, _) in LATE.items():
        submit(name, make)
    # the forger rewrites the time its submission claims, to before the due date
    (forged,) = (klass.exchange / COURSE_ID / "inbound").glob("forger+ps1+*")
    claim = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=3))
    (forged / "timestamp.txt").write_text(claim.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))

    out["collect"] = klass.run("collect", "ps1")
    before = klass.snapshot()
    out["autograde_j2"] = klass.run("autograde", "ps1", "-j", "2")
    out["after_j2"] = klass.snapshot()
    out["before"] = before
    out["scores_j2"] = gradebook_scores(klass.course, "ps1")

    # -j 1 from scratch (no cached execution, no grade in the gradebook), killed twice and
    # started again: nothing lost, the same grades
    shutil.rmtree(klass.course / ".grader" / "executions")
    shutil.rmtree(klass.course / "autograded")
    forget_grades(klass.course, "ps1")
    out["scores_forgotten"] = gradebook_scores(klass.course, "ps1")
    cache = klass.course / ".grader" / "executions"
    # while the sandboxes run: some executions cached, no grade written yet
    kill_autograde_when(klass, lambda: len(list(cache.glob("*.ipynb"))) >= 3)
    out["cached_when_killed"] = len(list(cache.glob("*.ipynb")))
    # while nbgrader writes the gradebook: every execution cached, a few submissions graded
    graded_folders = klass.course / "autograded"
    kill_autograde_when(klass, lambda: len(list(graded_folders.glob("*/ps1"))) >= 2)
    out["graded_when_killed"] = len(list(graded_folders.glob("*/ps1")))
    out["scores_when_killed"] = gradebook_scores(klass.course, "ps1")
    out["autograde_j1"] = klass.run("autograde", "ps1", "-j", "1")
    out["scores_j1"] = gradebook_scores(klass.course, "ps1")
    out["autograde_again"] = klass.run("autograde", "ps1", "-j", "2")
    out["scores_again"] = gradebook_scores(klass.course, "ps1")

    out["feedback"] = klass.run("feedback", "ps1")
    for name in list(ON_TIME) + list(LATE):
        out[f"fetch_feedback_{name}"] = klass.student(name, "fetch-feedback", "ps1", check=False)
    out["solutions"] = klass.run("solutions", "ps1")
    out["fetch_solutions"] = klass.student("correct", "fetch-solutions", "ps1")
    out["export"] = klass.run("export", "ps1", "--to", klass.root / "grades.csv")
    return klass


def kill_autograde_when(klass, condition, timeout=300):
    """Start `grader autograde ps1 -j 1` and SIGKILL its whole process group once `condition()`."""
    cmd = [sys.executable, "-m", "grader", "autograde", "ps1", "-j", "1"]
    proc = subprocess.Popen(cmd, cwd=klass.course, env=environment(klass.home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not condition():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def feedback_html(klass, name):
    pages = list((klass.students / name / "ps1" / "feedback").rglob("ps1.html"))
    assert pages, f"{name} has no feedback: {klass.out[f'fetch_feedback_{name}'].stderr}"
    return pages[0].read_text()


def test_commands_summarise_what_they_did(graded):
    assert "created course 'dlsys'" in graded.out["init"].stdout
    assert "generated release/ps1: 1 notebook(s) (ps1), 7 points" in graded.out["generate"].stdout
    assert "ps1: the solution passes 3/3 tests; the released version passes 0" in graded.out["generate"].stdout
    assert "collected 16 submission(s) of ps1; 16 new in the archive" in graded.out["collect"].stdout
    assert "forged timestamp: forger" in graded.out["collect"].stdout
    assert "autograded 16 submission(s) of ps1" in graded.out["autograde_j2"].stdout
    assert "sandbox bwrap" in graded.out["autograde_j2"].stdout


def test_validate_runs_the_visible_tests(graded):
    assert graded.out["validate_correct"].returncode == 0, graded.out["validate_correct"].stderr
    blank = graded.out["validate_blank"]
    assert blank.returncode == 1 and "failing visible tests" in blank.stderr
    assert "failed: assert add(1, 2) == 3" in blank.stdout


@pytest.mark.parametrize("name", list(ON_TIME) + list(LATE))
def test_exact_autograded_score(graded, name):
    expected = {**ON_TIME, **LATE}[name][1]
    scores = graded.out["scores_j2"][name]
    assert scores["_raw"] == expected
    assert scores.get("explain", 0) == 0  # the manual question waits for a person


def test_per_cell_partial_credit(graded):
    scores = graded.out["scores_j2"]
    assert (scores["partial"]["test_add"], scores["partial"]["test_mean_visible"],
            scores["partial"]["test_mean_hidden"]) == (2, 1, 0)
    assert scores["tamperer"]["test_mean_visible"] == 0 and scores["tamperer"]["test_mean_hidden"] == 0


def test_late_and_forged_submissions_are_penalised(graded):
    scores = graded.out["scores_j2"]
    for name in LATE:
        assert scores[name]["_seconds_late"] > 0, name
        assert scores[name]["_penalty"] == 5, name
    for name in ON_TIME:
        if name != "notjson":
            assert scores[name]["_seconds_late"] == 0, name
            assert scores[name]["_penalty"] == 0, name


def test_parallel_equals_serial_and_reruns_are_idempotent(graded):
    assert graded.out["scores_forgotten"] == {}  # the -j 1 grades were computed anew
    assert graded.out["scores_j2"] == graded.out["scores_j1"] == graded.out["scores_again"]
    assert "0 new execution(s)" in graded.out["autograde_again"].stdout


def test_killed_autograde_resumes(graded):
    out = graded.out
    assert out["cached_when_killed"] >= 3
    # the second kill landed while nbgrader was part-way through the class's grades
    assert 2 <= out["graded_when_killed"] < 16 and out["scores_when_killed"] != out["scores_j2"]
    assert "autograded 16 submission(s)" in graded.out["autograde_j1"].stdout


def test_nothing_outside_the_sandbox_changed(graded):
    before, after = graded.out["before"], graded.out["after_j2"]
    for area in ("course", "exchange", "home"):
        assert before[area] == after[area], area
    assert not (graded.course / "pwned.txt").exists()


def test_every_submission_is_archived(graded):
    archived = list((graded.course / "archive" / "ps1").glob("*/*+ps1+*"))
    assert len(archived) == 16
    assert all((entry / "arrival.json").exists() for entry in archived)


def test_snooper_saw_nothing(graded):
    nb = nbformat.read(str(graded.course / "autograded" / "snooper" / "ps1" / "ps1.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream")
    assert "BLOCKED" in text and "ENVIRONMENT" in text
    assert "READABLE" not in text and "LISTED" not in text and "WROTE" not in text, text
    env_line = next(line for line in text.splitlines() if line.startswith("ENVIRONMENT"))
    assert str(graded.root) not in env_line  # no course, exchange or home path leaks
    assert "PYTEST_CURRENT_TEST" not in env_line  # the grader's own environment is not passed on


@pytest.mark.parametrize("name, reason", [
    ("infinite", "CellTimeoutError"), ("memhog", "MemoryError"), ("network", "Network is unreachable"),
    ("tamperer", "test_mean_hidden were deleted"), ("cheater", "changed how its tests run"),
    ("duplicate", "'test_add' appears 2 times"),
    ("wrongkernel", "julia-1.9"), ("notjson", "not a valid notebook"), ("forger", "FORGED TIMESTAMP"),
])
def test_feedback_shows_the_reason(graded, name, reason):
    assert reason in feedback_html(graded, name)


def test_feedback_hides_hidden_test_source(graded):
    for name in ("correct", "partial", "tamperer", "cheater", "leaker"):
        page = feedback_html(graded, name)
        assert "SECRET_HIDDEN_CHECK" not in page and "mean([1, 2]) == 1.5" not in page
        assert "hidden tests: their source is not shown" in page
    assert "AssertionError" in feedback_html(graded, "partial")  # the result still shows


def test_solutions_refused_before_the_due_date(graded):
    early = graded.out["solutions_early"]
    assert early.returncode == 1 and "can be released from" in early.stderr
    fetch = graded.out["fetch_solutions_early"]
    assert fetch.returncode == 1 and "not released" in fetch.stderr


def test_solutions_after_the_due_date_have_no_hidden_tests(graded):
    folder = graded.students / "correct" / "ps1-solution"
    text = (folder / "ps1.ipynb").read_text()
    assert "return sum(xs) / len(xs)" in text
    assert "SECRET_HIDDEN_CHECK" not in text and "BEGIN HIDDEN TESTS" not in text


def test_export_matches_the_gradebook(graded):
    with open(graded.root / "grades.csv", newline="") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    scores = graded.out["scores_j1"]
    assert set(rows) == set(scores)
    for name, row in rows.items():
        assert row["lms_user_id"].startswith("lms-")
        assert float(row["raw_score"]) == scores[name]["_raw"]
        assert float(row["late_penalty"]) == scores[name]["_penalty"]
        assert float(row["score"]) == max(scores[name]["_raw"] - scores[name]["_penalty"], 0)
        for grade_id in ("test_add", "test_mean_visible", "test_mean_hidden", "explain"):
            assert float(row[f"ps1:{grade_id}"]) == scores[name][grade_id]
