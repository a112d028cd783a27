"""The same flow through nbgrader's server extensions in real `jupyter lab` processes on
loopback: the formgrader's REST routes for the instructor, the assignment list's for
a student, with the course config that puts the sandbox into nbgrader's autograde."""

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
from simulated_class import correct, memory_hog, write_submission

pytestmark = pytest.mark.slow
COURSE_ID = "dlsys"
TOKEN = "grader-test-token"


class Lab:
    """A `jupyter lab` process serving `root`, and its REST API."""

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
        runtime = Path(home) / ".local" / "share" / "jupyter" / "runtime" / f"jpserver-{self.proc.pid}.json"
        deadline = time.monotonic() + 180
        self.port = None
        while True:
            try:
                if self.port is None and runtime.exists():
                    self.port = json.loads(runtime.read_text())["port"]
                if self.port is not None and "version" in self.call("GET", "/api"):
                    break
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
        with urllib.request.urlopen(request, timeout=300) as response:
            text = response.read().decode()
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


def serve_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    home, exchange, course = root / "home", root / "exchange", root / "course"
    home.mkdir()
    grader(["init", course, "--course-id", COURSE_ID, "--exchange", exchange], root, home)
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("c.Execute.timeout = 5\nc.Sandbox.memory_mb = 1024\nc.ExchangeCollect.check_owner = False\n")
    (course / "source" / "ps1").mkdir(parents=True)
    shutil.copy(FIXTURES / "ps1" / "ps1.ipynb", course / "source" / "ps1" / "ps1.ipynb")
    alice_dir = root / "alice"
    alice_dir.mkdir()
    # the lab's user is whoever runs the tests; on a hub the student id is the login
    (alice_dir / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.student_id = 'alice'\n")

    labs = []
    try:
        teacher = Lab(course, home, "instructor")
        labs.append(teacher)
        out = {"assign": teacher.call("POST", "/formgrader/api/assignment/ps1/assign"),
               "release": teacher.call("POST", "/formgrader/api/assignment/ps1/release")}

        alice = Lab(alice_dir, home, "alice")
        labs.append(alice)
        out["listed"] = alice.call("GET", "/assignments", params={"course_id": COURSE_ID})
        alice.call("POST", "/assignments/fetch", {"course_id": COURSE_ID, "assignment_id": "ps1"})
        # alice answers in the browser: the notebook is saved through the contents API
        model = alice.call("GET", "/api/contents/ps1/ps1.ipynb")
        nb = correct(nbformat.from_dict(model["content"]), {})
        alice.call("PUT", "/api/contents/ps1/ps1.ipynb", {"type": "notebook", "format": "json",
                                                         "content": nb})
        out["submit"] = alice.call("POST", "/assignments/submit",
                                   {"course_id": COURSE_ID, "assignment_id": "ps1"})

        # a second student submits a memory hog from the command line
        bob_dir = root / "bob"
        bob_dir.mkdir()
        common = ["--course-id", COURSE_ID, "--exchange", exchange, "--student", "bob"]
        grader(["fetch", "ps1", *common], bob_dir, home)
        write_submission(memory_hog, bob_dir / "ps1" / "ps1.ipynb", {})
        grader(["submit", "ps1", *common], bob_dir, home)

        out["collect"] = teacher.call("POST", "/formgrader/api/assignment/ps1/collect")
        for student in ("alice", "bob"):
            out[f"autograde_{student}"] = teacher.call(
                "POST", f"/formgrader/api/submission/ps1/{student}/autograde")
        out["submissions"] = teacher.call("GET", "/formgrader/api/submissions/ps1")
        out["generate_feedback"] = teacher.call("POST", "/formgrader/api/assignment/ps1/generate_feedback")
        out["release_feedback"] = teacher.call("POST", "/formgrader/api/assignment/ps1/release_feedback")
        out["fetch_feedback"] = alice.call("POST", "/assignments/fetch_feedback",
                                           {"course_id": COURSE_ID, "assignment_id": "ps1"})
    finally:
        for lab in labs:
            lab.stop()
    return {"root": root, "course": course, "alice": alice_dir, "out": out}


def test_instructor_routes_succeed(served):
    out = served["out"]
    for step in ("assign", "release", "collect", "autograde_alice", "autograde_bob",
                 "generate_feedback", "release_feedback"):
        assert out[step]["success"], (step, out[step])


def test_student_routes(served):
    listed = served["out"]["listed"]
    assert listed["success"] and any(a["assignment_id"] == "ps1" for a in listed["value"])
    assert (served["alice"] / "ps1" / "ps1.ipynb").exists()


def test_formgrader_autograde_runs_in_the_sandbox(served):
    scores = {s["student"]: s["score"] for s in served["out"]["submissions"]}
    assert scores == {"alice": 5, "bob": 2}
    assert list((served["course"] / ".grader" / "executions").glob("*.ipynb"))
    nb = nbformat.read(str(served["course"] / "autograded" / "bob" / "ps1" / "ps1.ipynb"), as_version=4)
    assert any(o.get("ename") == "MemoryError" for c in nb.cells for o in c.get("outputs", []))


def test_feedback_through_the_server_hides_hidden_tests(served):
    pages = list((served["alice"] / "ps1" / "feedback").rglob("ps1.html"))
    assert pages, served["out"]["fetch_feedback"]
    page = pages[0].read_text()
    assert "SECRET_HIDDEN_CHECK" not in page and "hidden tests: their source is not shown" in page
