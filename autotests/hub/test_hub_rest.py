"""The hub without a browser: login, spawn, the course service's formgrader API and the
exchange as each student sees it, on a hub started by `hub/launch.py` (single-account
mode, which needs no root; `make hub-users` makes real accounts for a class)."""

import json
import time

import nbformat
import pytest

from hub_testkit import COURSE, Hub
from simulated_class import correct, partial

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    pytest.importorskip("jupyterhub", reason="JupyterHub is not installed (pip install -e '.[hub]')")
    pytest.importorskip("configurable_http_proxy", reason="configurable-http-proxy is not installed "
                                                          "(pip install -e '.[hub]')")
    from grader_testkit import require_bwrap

    require_bwrap()
    running = Hub(tmp_path_factory.mktemp("hub-rest"))
    yield running
    running.stop()


def solve(hub, s, make):
    """The student's answer saved through their server's contents API, as the editor does."""
    path = f"/user/{s.name}/api/contents/{COURSE}/ps1/ps1.ipynb"
    model = hub.call(s, "GET", path)
    nb = make(nbformat.from_dict(model["content"]), {})
    hub.call(s, "PUT", path, json={"type": "notebook", "format": "json", "content": nb})


def test_class_through_the_hub_api(hub):
    start = time.monotonic()
    # login: a wrong password is refused; the roster's users get in with their own
    assert hub.session("alice", password="not-her-password") is None
    assert hub.session("grader-dlsys", password="") is None  # the grader account cannot log in
    teacher = hub.session("instructor")
    me = hub.call(teacher, "GET", "/hub/api/user")
    assert {"instructors", f"formgrade-{COURSE}", f"nbgrader-{COURSE}"} <= set(me["groups"]) and me["admin"]
    ta = hub.session("ta")
    assert f"formgrade-{COURSE}" in hub.call(ta, "GET", "/hub/api/user")["groups"]

    # the course service: nbgrader's formgrader, run in the course folder
    service = hub.call(teacher, "GET", f"/hub/api/services/{COURSE}")
    assert service["name"] == COURSE
    form = f"/services/{COURSE}/formgrader/api"
    assert "ps1" in {a["name"] for a in hub.call(teacher, "GET", f"{form}/assignments")}
    assert hub.call(teacher, "POST", f"{form}/assignment/ps1/assign")["success"]
    assert hub.call(teacher, "POST", f"{form}/assignment/ps1/release")["success"]
    assert hub.call(ta, "GET", f"{form}/assignments")  # TAs grade too
    # the formgrader opens as a page of its own (JupyterHub's frame-ancestors 'none')
    page = teacher.get(f"{hub.url}/services/{COURSE}/formgrader", timeout=60)
    assert page.ok and "formgrade" in page.text.lower()
    assert "frame-ancestors 'none'" in page.headers.get("Content-Security-Policy", "")

    students = {name: hub.session(name) for name in ("alice", "bob")}
    for name, s in students.items():
        user = hub.spawn(s)
        assert user["servers"][""]["ready"], name
        # a student is not let into the formgrader, and their own server has none
        assert s.get(f"{hub.url}{form}/assignments", timeout=60).status_code == 403
        assert s.get(f"{hub.url}/user/{name}/formgrader", timeout=60).status_code == 404
        listed = hub.call(s, "GET", f"/user/{name}/assignments", params={"course_id": COURSE})
        assert listed["success"] and [a["assignment_id"] for a in listed["value"]] == ["ps1"], listed
        assert hub.call(s, "GET", f"/user/{name}/courses")["value"] == [COURSE]
        # the lectures, pulled into the home at the server's start
        assert (hub.state / "homes" / name / COURSE / "lectures" / "02_softmax_regression.ipynb").exists()
        # JupyterLab asks nothing of the internet: no news, no update check
        news = hub.call(s, "GET", f"/user/{name}/lab/api/settings/@jupyterlab/apputils-extension:notification")
        defaults = {k: v.get("default") for k, v in news["schema"]["properties"].items()}
        assert (defaults["fetchNews"], defaults["checkForUpdates"]) == ("false", False), defaults
        fetched = hub.call(s, "POST", f"/user/{name}/assignments/fetch",
                           json={"course_id": COURSE, "assignment_id": "ps1"})
        assert fetched["success"], fetched
    solve(hub, students["alice"], correct)
    solve(hub, students["bob"], partial)
    for name, s in students.items():
        submitted = hub.call(s, "POST", f"/user/{name}/assignments/submit",
                             json={"course_id": COURSE, "assignment_id": "ps1"})
        assert submitted["success"], submitted

    # submissions are filed under each hub login, though every server is one system account
    inbound = sorted(p.name.split("+")[0] for p in (hub.exchange / COURSE / "inbound").iterdir())
    assert inbound == ["alice", "bob"]
    # the exchange as each student sees it: their own submission only
    for name, s in students.items():
        listed = hub.call(s, "GET", f"/user/{name}/assignments", params={"course_id": COURSE})
        owners = {sub["student_id"] for a in listed["value"] if a["status"] == "submitted"
                  for sub in [a]}
        assert owners == {name}, listed

    # collect and autograde from the formgrader: the same sandbox as `grader autograde`
    assert hub.call(teacher, "POST", f"{form}/assignment/ps1/collect")["success"]
    for name in students:
        graded = hub.call(teacher, "POST", f"{form}/submission/ps1/{name}/autograde")
        assert graded["success"], graded
    scores = {s["student"]: s["score"] for s in hub.call(teacher, "GET", f"{form}/submissions/ps1")}
    assert scores == {"alice": 5, "bob": 3}, scores
    modes = {json.loads(p.read_text())["mode"]
             for p in (hub.course_dir / ".grader" / "executions").glob("*.json")}
    assert modes == {"bwrap"}
    print(f"\nmeasured: the hub's REST flow (2 students, formgrader autograde) took "
          f"{time.monotonic() - start:.1f} s")
