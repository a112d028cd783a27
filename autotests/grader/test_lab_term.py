"""The term in JupyterLab's assignment list: the server extension (grader/lab_term.py), the
lab extension's committed bundle (grader/labextension/) and both in a real browser.

A course releases ps1 (due in two days, alice has a 2-day extension, late-day budget 3)
and ps2 (no extension); alice fetches ps1, submits it and fetches its feedback, which a
regrade then releases again. Her JupyterLab is started the way `pip install`
sets every JupyterLab of the environment up (grader/jupyter/ holds the config file and the
bundle pyproject.toml installs), with her zone America/New_York; GET /grader/term answers
her lines, and nbgrader's Assignments panel shows them in each row. The panel is saved as
hub/screenshots/student-assignment-list-due.png.
"""

import datetime
import glob
import json
import os
import secrets
import subprocess
import sys
import tomllib

import nbformat
import pytest
import requests

from grader_testkit import FIXTURES, REPO, environment, grader, grader_inprocess
from simulated_class import solved

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "grader" / "labextension"))
import build as labextension_build  # noqa: E402

sys.path.insert(0, str(REPO / "autotests" / "hub"))
from hub_testkit import wait_for_server  # noqa: E402

JUPYTER = REPO / "grader" / "jupyter"
ZONE = "America/New_York"
SCREENSHOT = REPO / "hub" / "screenshots" / "student-assignment-list-due.png"


def test_the_committed_bundle_is_built_from_the_current_source():
    recorded = labextension_build.SOURCE_HASH.read_text().strip()
    assert recorded == labextension_build.source_hash(), \
        "grader/labextension changed since its bundle was built: run `make labextension` and commit the bundle"
    package = json.loads((labextension_build.BUNDLE / "package.json").read_text())
    remote = package["jupyterlab"]["_build"]["load"]
    assert (labextension_build.BUNDLE / remote).is_file(), f"the bundle names {remote}, which is missing"


def test_set_up_installs_the_bundle_and_enables_the_server_extension():
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    installed = {os.path.normpath(f) for patterns in data_files.values() for p in patterns
                 for f in glob.glob(str(REPO / p))}
    bundle = {os.path.normpath(str(p)) for p in labextension_build.BUNDLE.rglob("*") if p.is_file()}
    config = JUPYTER / "jupyter_server_config.d" / "grader.lab_term.json"
    assert bundle | {str(config)} == installed
    assert json.loads(config.read_text())["ServerApp"]["jpserver_extensions"] == {"grader.lab_term": True}
    # setuptools' editable installs (`make setup`) skip data-files: the Makefile puts the same two in place
    makefile = (REPO / "Makefile").read_text()
    assert "cp grader/jupyter/jupyter_server_config.d/grader.lab_term.json $(VENV)/etc/jupyter/" \
        "jupyter_server_config.d/" in makefile
    assert "ln -s $(abspath grader/jupyter/labextensions/grader-term) $(VENV)/share/jupyter/labextensions/" \
        "grader-term" in makefile


# ---- alice's JupyterLab ------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab-term")
    home, root, exchange = tmp / "home", tmp / "course", tmp / "exchange"
    home.mkdir()
    grader(["init", root, "--course-id", "c1", "--exchange", exchange], tmp, home)
    with open(root / "nbgrader_config.py", "a") as fh:
        # the sandbox is tested elsewhere; this course's own fixture runs unconfined
        fh.write('\nc.LatePolicy.penalty = "late_days"\nc.LatePolicy.late_day_budget = 3\n'
                 'c.Sandbox.mode = "none"\n')
    (tmp / "roster.csv").write_text("id,first_name,last_name,email,lms_user_id\nalice,Alice,A,,1\n")
    grader_inprocess(["roster", tmp / "roster.csv"], root, home)
    due = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(days=2)
    for name in ("ps1", "ps2"):
        (root / "source" / name).mkdir(parents=True)
        (root / "source" / name / f"{name}.ipynb").write_text((FIXTURES / "ps1" / "ps1.ipynb").read_text())
        grader(["generate", name, "--due", due.isoformat(), "--no-proof"], root, home)
        grader_inprocess(["release", name], root, home)
    grader_inprocess(["extend", "ps1", "alice", "2d"], root, home)

    work, alice_home = tmp / "alice", tmp / "alice-home"
    work.mkdir()
    alice_home.mkdir()

    def alice(*args):
        return grader_inprocess([*args, "--course-id", "c1", "--exchange", exchange, "--student", "alice"],
                                work, alice_home)

    # ps1: fetched, submitted, graded, its feedback fetched, then released again by a regrade
    alice("fetch", "ps1")
    notebook = work / "ps1" / "ps1.ipynb"
    nbformat.write(solved(nbformat.read(str(notebook), as_version=4)), str(notebook))
    alice("submit", "ps1", "--yes")
    for step in (["collect", "ps1"], ["autograde", "ps1"], ["feedback", "ps1"]):
        grader_inprocess(step, root, home)
    alice("fetch-feedback", "ps1")
    request = alice("regrade", "ps1", "--part", "explain", "--reason", "see my answer").stdout
    request_id = request.split("request ")[1].split()[0]
    grader_inprocess(["regrades", "resolve", request_id, "--points", "2", "--note", "agreed"], root, home)
    (work / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = 'c1'\nc.Exchange.root = {str(exchange)!r}\n"
        "c.CourseDirectory.student_id = 'alice'\n")

    token = secrets.token_hex(16)
    port = free_port()
    env = {**environment(alice_home), "TZ": ZONE, "JUPYTER_PATH": str(JUPYTER),
           "JUPYTER_CONFIG_PATH": str(JUPYTER)}
    log = open(tmp / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}", "--allow-root"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url, token, proc, tmp / "lab.log")
        yield {"url": url, "token": token, "due": due, "log": tmp / "lab.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_up(url, token, proc, log, timeout=120):
    wait_for_server("JupyterLab", proc, f"{url}/api/status", lambda: log.read_text()[-4000:], timeout,
                    interval=0.5, token=token)


def expected_lines(due):
    from zoneinfo import ZoneInfo

    def shown(moment):
        return moment.astimezone(ZoneInfo(ZONE)).strftime("%a %d %b %Y %H:%M %Z") + f" ({ZONE})"

    return {"ps1": [f"due {shown(due)}", f"your extension: 2d, so due {shown(due + datetime.timedelta(days=2))}",
                    "late days left: 3 of 3"],
            "ps2": [f"due {shown(due)}", "late days left: 3 of 3"]}


def test_the_server_answers_alices_term(lab):
    answer = requests.get(f"{lab['url']}/grader/term", params={"course_id": "c1", "token": lab["token"]},
                          timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert sorted(body["assignments"]) == ["ps1", "ps2"]
    for name, lines in expected_lines(lab["due"]).items():
        assert body["assignments"][name]["lines"][:len(lines)] == lines
        assert body["assignments"][name]["lines"][-1].startswith("late work: ")
    # the regrade released ps1's feedback again after alice fetched it
    assert (body["assignments"]["ps1"]["feedback_updated"], body["assignments"]["ps2"]["feedback_updated"]) == \
        (True, False)

    other = requests.get(f"{lab['url']}/grader/term", params={"course_id": "c2", "token": lab["token"]},
                         timeout=30)
    assert other.status_code == 200 and other.json() == {"course_id": "c2", "assignments": {}}
    missing = requests.get(f"{lab['url']}/grader/term", params={"token": lab["token"]}, timeout=30)
    assert missing.status_code == 400 and "course_id" in missing.json()["message"]
    assert requests.get(f"{lab['url']}/grader/term", params={"course_id": "c1"}, timeout=30).status_code == 403


def test_the_assignment_list_shows_due_date_extension_and_late_days(lab):
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[hub]')")
    from test_hub_browser import CHROMIUM, FLAGS, open_assignments
    if not os.path.exists(CHROMIUM):
        pytest.skip("Chromium is not installed: sudo apt-get install chromium")
    from playwright.sync_api import sync_playwright

    expected = expected_lines(lab["due"])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(60_000)
            page.goto(f"{lab['url']}/lab?token={lab['token']}")
            page.wait_for_selector("#jp-main-dock-panel")
            open_assignments(page)
            rows = {"ps1": "#fetched_assignments_list > .list_item", "ps2": "#released_assignments_list > .list_item",
                    "ps1 submitted": "#submitted_assignments_list > .list_item"}
            for name, selector in rows.items():
                row = page.locator(selector, has_text=name.split()[0])
                row.locator(".grader-term").wait_for()
                shown = row.locator(".grader-term .grader-term-line").all_inner_texts()
                assert shown[:len(expected[name.split()[0]])] == expected[name.split()[0]], shown
                changed = "feedback changed since you fetched it: fetch it again"
                assert (changed in shown) == (name == "ps1 submitted"), (name, shown)
            assert "extension" not in page.locator(rows["ps2"], has_text="ps2").inner_text()
            # nbgrader's own flag on the submission: with her copy fetched, it is shown only
            # when nbgrader finds the exchange's page different (feedback_updated)
            submitted = page.locator(rows["ps1 submitted"], has_text="ps1")
            assert "(feedback available to fetch)" in submitted.inner_text()
            assert "(view feedback)" not in submitted.inner_text()
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))

            # fetched again: nbgrader redraws the list, and the redrawn row asks the server anew
            page.locator("#submitted_assignments_list button", has_text="Fetch Feedback").click()
            page.wait_for_selector("#submitted_assignments_list a:has-text('view feedback')")
            submitted = page.locator(rows["ps1 submitted"], has_text="ps1")
            submitted.locator(".grader-term").wait_for()
            shown = submitted.locator(".grader-term .grader-term-line").all_inner_texts()
            assert shown[:len(expected["ps1"])] == expected["ps1"] and not any("feedback" in line for line in shown)
        finally:
            browser.close()
