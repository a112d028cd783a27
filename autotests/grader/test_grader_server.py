"""The same flow through nbgrader's server extensions in real `jupyter lab` processes on
loopback: the formgrader's REST routes for the instructor, the assignment list's for
the students, with the course config that puts the sandbox into nbgrader's autograde.

Three students work in their own lab (fetch, save through the contents API, submit,
fetch feedback, fetch solutions); a fourth submits from the command line. The
instructor assigns, releases, sets the due date, collects, autogrades, grades the
written answer by hand and releases feedback through the formgrader; solutions and
the CSV export, which nbgrader has no route for, go through the `grader` command.
"""

import csv
import datetime
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest

from grader_testkit import FIXTURES, environment, grader, require_bwrap, run_once
from simulated_class import ON_TIME, write_submission

pytestmark = pytest.mark.slow
COURSE_ID = "dlsys"
TOKEN = "grader-test-token"
# students who work in the browser -> the submission maker of the end-to-end class whose
# behaviour (and so expected autograded score) they share
BROWSER_STUDENTS = {"alice": "correct", "carol": "partial", "tess": "tamperer"}
CLI_STUDENTS = {"bob": "memhog"}
AUTOGRADED = {name: ON_TIME[kind][1] for name, kind in {**BROWSER_STUDENTS, **CLI_STUDENTS}.items()}
# points the instructor gives by hand for the written answer (worth 2); the others stay ungraded
MANUAL = {"alice": 2, "carol": 1}
MAX_SCORE = 7
HIDDEN_MARKERS = ("SECRET_HIDDEN_CHECK", "BEGIN HIDDEN TESTS", "mean([1, 2]) == 1.5")


class Lab:
    """A `jupyter lab` process serving `root`, and its REST API.

    Starting returns at once; `wait_ready` blocks until the server answers, so several
    labs can start side by side.
    """

    def __init__(self, root, home, user):
        env = environment(home)
        env.update(USER=user, LOGNAME=user)
        self.log = open(Path(home) / f"lab-{user}.log", "w")
        # port 0: the server picks a free port and writes it to its runtime file
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--port=0",
             "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
             f"--ServerApp.root_dir={root}"] + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=str(root), env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.runtime = Path(home) / ".local" / "share" / "jupyter" / "runtime" / f"jpserver-{self.proc.pid}.json"
        self.port = None

    def wait_ready(self, seconds=180):
        deadline = time.monotonic() + seconds
        while True:
            try:
                if self.port is None and self.runtime.exists():
                    self.port = json.loads(self.runtime.read_text())["port"]
                if self.port is not None and "version" in self.call("GET", "/api"):
                    return self
            except (OSError, ValueError, KeyError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab did not start: see {self.log.name}")
            time.sleep(0.5)

    def call(self, method, path, data=None, params=None):
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        body = json.dumps(data).encode() if data is not None else (b"" if method != "GET" else None)
        request = urllib.request.Request(url, data=body, method=method, headers={
            "Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as err:
            # keep the server's explanation: a bare "HTTP Error 500" says nothing
            raise AssertionError(f"{method} {path} -> {err.code}: {err.read().decode()[:2000]}") from None
        return json.loads(text) if text else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    require_bwrap()
    return run_once(tmp_path_factory, "grader-served", lambda: serve_class(tmp_path_factory))


def student_folder(root, exchange, name):
    """(folder, home) of a student: the lab's root with its own nbgrader config, and a home.

    Each student has their own home, as on a hub: nbgrader keeps submissions in a
    per-home cache, and fetching feedback matches any `*+ps1+*` entry found there.
    """
    folder, home = root / "students" / name, root / "homes" / name
    folder.mkdir(parents=True)
    home.mkdir(parents=True)
    # the lab's user is whoever runs the tests; on a hub the student id is the login
    (folder / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.student_id = {name!r}\n")
    return folder, home


def grades_by_name(teacher, student):
    """{grade name: grade dict} of the student's ps1 notebook, from the formgrader's API."""
    (notebook,) = teacher.call("GET", f"/formgrader/api/student_notebook_submissions/{student}/ps1")
    grades = teacher.call("GET", "/formgrader/api/grades", params={"submission_id": notebook["id"]})
    return {g["name"]: g for g in grades}


def serve_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    home, exchange, course = root / "home", root / "exchange", root / "course"
    home.mkdir()
    grader(["init", course, "--course-id", COURSE_ID, "--exchange", exchange], root, home)
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("c.Execute.timeout = 5\nc.Sandbox.memory_mb = 1024\nc.ExchangeCollect.check_owner = False\n")
    (course / "source" / "ps1").mkdir(parents=True)
    shutil.copy(FIXTURES / "ps1" / "ps1.ipynb", course / "source" / "ps1" / "ps1.ipynb")
    folders = {name: student_folder(root, exchange, name) for name in {**BROWSER_STUDENTS, **CLI_STUDENTS}}

    labs = []
    out = {"grades": {}, "manual": {}}
    try:
        teacher = Lab(course, home, "instructor")
        labs.append(teacher)
        students = {}
        for name in BROWSER_STUDENTS:
            students[name] = Lab(folders[name][0], folders[name][1], name)
            labs.append(students[name])
        for lab in labs:
            lab.wait_ready()

        out["assign"] = teacher.call("POST", "/formgrader/api/assignment/ps1/assign")
        out["release"] = teacher.call("POST", "/formgrader/api/assignment/ps1/release")

        for name, kind in BROWSER_STUDENTS.items():
            lab, make = students[name], ON_TIME[kind][0]
            out[f"listed_{name}"] = lab.call("GET", "/assignments", params={"course_id": COURSE_ID})
            out[f"fetch_{name}"] = lab.call("POST", "/assignments/fetch",
                                            {"course_id": COURSE_ID, "assignment_id": "ps1"})
            # the student answers in the browser: the notebook is saved through the contents API
            model = lab.call("GET", "/api/contents/ps1/ps1.ipynb")
            nb = make(nbformat.from_dict(model["content"]), {})
            lab.call("PUT", "/api/contents/ps1/ps1.ipynb", {"type": "notebook", "format": "json",
                                                           "content": nb})
            out[f"submit_{name}"] = lab.call("POST", "/assignments/submit",
                                             {"course_id": COURSE_ID, "assignment_id": "ps1"})

        # one student submits from the command line
        for name, kind in CLI_STUDENTS.items():
            folder, student_home = folders[name]
            common = ["--course-id", COURSE_ID, "--exchange", exchange, "--student", name]
            grader(["fetch", "ps1", *common], folder, student_home)
            write_submission(ON_TIME[kind][0], folder / "ps1" / "ps1.ipynb", {})
            grader(["submit", "ps1", *common], folder, student_home)

        # the deadline passes, set in the formgrader's assignment dialog (UTC, as nbgrader stores it)
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        out["due"] = teacher.call("PUT", "/formgrader/api/assignment/ps1",
                                  {"duedate_notimezone": now.isoformat(), "duedate_timezone": "UTC"})
        out["collect"] = teacher.call("POST", "/formgrader/api/assignment/ps1/collect")
        for student in AUTOGRADED:
            out[f"autograde_{student}"] = teacher.call(
                "POST", f"/formgrader/api/submission/ps1/{student}/autograde")
        out["submissions"] = teacher.call("GET", "/formgrader/api/submissions/ps1")

        # the instructor reads the written answers and scores them by hand
        for student in AUTOGRADED:
            out["grades"][student] = grades_by_name(teacher, student)
        for student, points in MANUAL.items():
            grade_id = out["grades"][student]["explain"]["id"]
            out["manual"][student] = teacher.call("PUT", f"/formgrader/api/grade/{grade_id}",
                                                  {"manual_score": points})
        out["submissions_graded"] = teacher.call("GET", "/formgrader/api/submissions/ps1")

        out["generate_feedback"] = teacher.call("POST", "/formgrader/api/assignment/ps1/generate_feedback")
        out["release_feedback"] = teacher.call("POST", "/formgrader/api/assignment/ps1/release_feedback")
        for name, lab in students.items():
            out[f"fetch_feedback_{name}"] = lab.call("POST", "/assignments/fetch_feedback",
                                                     {"course_id": COURSE_ID, "assignment_id": "ps1"})

        # solutions: nbgrader has no route for them, so the command line releases them,
        # and a student fetches them like any assignment
        alice = students["alice"]
        out["listed_before_solutions"] = alice.call("GET", "/assignments", params={"course_id": COURSE_ID})
        out["solutions"] = grader(["solutions", "ps1"], course, home).stdout
        out["listed_after_solutions"] = alice.call("GET", "/assignments", params={"course_id": COURSE_ID})
        out["fetch_solutions"] = alice.call("POST", "/assignments/fetch",
                                            {"course_id": COURSE_ID, "assignment_id": "ps1-solution"})
        out["solution_model"] = alice.call("GET", "/api/contents/ps1-solution/ps1.ipynb")

        out["export"] = grader(["export", "ps1", "--to", root / "grades.csv"], course, home).stdout
    finally:
        for lab in labs:
            lab.stop()
    return {"root": root, "course": course, "folders": {n: f for n, (f, _) in folders.items()}, "out": out}


def scores_of(submissions):
    return {s["student"]: s["score"] for s in submissions}


def assignment_ids(listing):
    assert listing["success"], listing
    return {a["assignment_id"] for a in listing["value"]}


def feedback_page(served, student):
    pages = list((served["folders"][student] / "ps1" / "feedback").rglob("ps1.html"))
    assert pages, served["out"][f"fetch_feedback_{student}"]
    return pages[0].read_text()


def test_instructor_routes_succeed(served):
    out = served["out"]
    steps = ["assign", "release", "collect", "generate_feedback", "release_feedback"]
    for step in steps + [f"autograde_{s}" for s in AUTOGRADED]:
        assert out[step]["success"], (step, out[step])
    assert out["due"]["duedate"] is not None


def test_student_routes(served):
    out = served["out"]
    for name in BROWSER_STUDENTS:
        assert "ps1" in assignment_ids(out[f"listed_{name}"])
        assert (served["folders"][name] / "ps1" / "ps1.ipynb").exists()
        assert out[f"submit_{name}"]["success"], out[f"submit_{name}"]
    # every submission, from the browser or the command line, reached the gradebook
    assert {s["student"] for s in out["submissions"]} == set(AUTOGRADED)


def test_tamperer_saved_its_edits_through_the_contents_api(served):
    nb = nbformat.read(str(served["folders"]["tess"] / "ps1" / "ps1.ipynb"), as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert "test_mean_hidden" not in ids
    assert next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                == "test_mean_visible").source == "pass"


def test_formgrader_autograde_runs_in_the_sandbox(served):
    assert scores_of(served["out"]["submissions"]) == AUTOGRADED
    assert list((served["course"] / ".grader" / "executions").glob("*.ipynb"))
    nb = nbformat.read(str(served["course"] / "autograded" / "bob" / "ps1" / "ps1.ipynb"), as_version=4)
    assert any(o.get("ename") == "MemoryError" for c in nb.cells for o in c.get("outputs", []))


def test_per_cell_partial_credit(served):
    grades = served["out"]["grades"]
    partial = {name: grades["carol"][name]["auto_score"]
               for name in ("test_add", "test_mean_visible", "test_mean_hidden")}
    assert partial == {"test_add": 2, "test_mean_visible": 1, "test_mean_hidden": 0}
    # the weakened visible test and the deleted hidden one were restored and failed
    assert grades["tess"]["test_mean_visible"]["auto_score"] == 0
    assert grades["tess"]["test_mean_hidden"]["auto_score"] == 0


def test_manual_grade_through_the_formgrader(served):
    out = served["out"]
    for student in AUTOGRADED:  # autograde leaves the written answer to a person
        explain = out["grades"][student]["explain"]
        assert explain["needs_manual_grade"] and explain["auto_score"] is None, explain
    for student, points in MANUAL.items():
        assert out["manual"][student]["manual_score"] == points
        assert out["manual"][student]["needs_manual_grade"] is False
    expected = {s: score + MANUAL.get(s, 0) for s, score in AUTOGRADED.items()}
    assert scores_of(out["submissions_graded"]) == expected
    pending = {s["student"]: s["needs_manual_grade"] for s in out["submissions_graded"]}
    assert pending == {s: s not in MANUAL for s in AUTOGRADED}


def test_feedback_through_the_server_hides_hidden_tests(served):
    for student in BROWSER_STUDENTS:
        page = feedback_page(served, student)
        assert not [m for m in HIDDEN_MARKERS if m in page], student
        assert "hidden tests: their source is not shown" in page, student
    # the feedback was generated after the manual grade, and shows it
    assert f"(Score: {MAX_SCORE:.1f} / {MAX_SCORE:.1f})" in feedback_page(served, "alice")
    carol = AUTOGRADED["carol"] + MANUAL["carol"]
    assert f"(Score: {carol:.1f} / {MAX_SCORE:.1f})" in feedback_page(served, "carol")


def test_solutions_fetched_through_the_lab_have_no_hidden_tests(served):
    out = served["out"]
    # past the due date but not yet released: the lab does not offer them
    assert "ps1-solution" not in assignment_ids(out["listed_before_solutions"])
    assert "released as ps1-solution" in out["solutions"]
    assert "ps1-solution" in assignment_ids(out["listed_after_solutions"])
    fetched = {a["assignment_id"]: a["status"] for a in out["fetch_solutions"]["value"]
               if a["assignment_id"] == "ps1-solution"}
    assert fetched == {"ps1-solution": "fetched"}
    text = json.dumps(out["solution_model"]["content"])
    assert "return sum(xs) / len(xs)" in text and "Because `len([])` is 0" in text
    assert not [m for m in HIDDEN_MARKERS if m in text]
    assert "assert mean([4]) == 4" in text  # the visible part of the hidden-test cell stays


def test_export_matches_the_formgrader(served):
    with open(served["root"] / "grades.csv", newline="") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    submissions = {s["student"]: s for s in served["out"]["submissions_graded"]}
    assert set(rows) == set(submissions) == set(AUTOGRADED)
    for student, row in rows.items():
        assert row["submitted"] == "yes"
        assert float(row["raw_score"]) == submissions[student]["score"], student
        assert float(row["score"]) == submissions[student]["score"], student
        assert float(row["late_penalty"]) == 0, student
        assert float(row["max_score"]) == submissions[student]["max_score"] == MAX_SCORE
        assert float(row["ps1:explain"]) == MANUAL.get(student, 0), student
        assert row["needs_manual_grade"] == ("no" if student in MANUAL else "yes"), student


def test_the_formgrader_feedback_carries_the_grading_notes(served):
    # the checks and the notes are nbgrader preprocessors of the course config, so the
    # formgrader's autograde and feedback buttons record and show them too
    tess = feedback_page(served, "tess")
    assert 'class="grader-notes"' in tess and "were deleted" in tess
    assert 'class="grader-notes"' not in feedback_page(served, "alice")
