"""A class through the hub in a real browser: Debian's Chromium driven by Playwright.

The instructor logs in at /hub/login and releases ps1 from the formgrader; three
students log in, fetch it from the Assignments panel, answer, run all cells, validate
and submit (one correct, one partial, one that tampers with its tests); the instructor
sets the due date, collects, autogrades and releases feedback from the formgrader; a
student fetches the feedback and, after the due date, the solutions; the exported
grades equal the formgrader's scores. Every page is saved as a PNG in the folder
printed at the end (NK_SCREENSHOTS to choose it).
"""

import csv
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hub_testkit import COURSE, REPO, Hub

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
# no background connections (this machine's network is closed) and a fresh profile per
# launch (Playwright makes one); --no-sandbox: Chromium's own sandbox cannot start as root
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ADD = "def add(a, b):\n    return a + b"
MEAN = "def mean(xs):\n    return sum(xs) / len(xs)"


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("jupyterhub", reason="JupyterHub is not installed (pip install -e '.[hub]')")
    playwright_api = pytest.importorskip("playwright.sync_api",
                                         reason="Playwright is not installed (pip install -e '.[hub]')")
    if not os.path.exists(CHROMIUM):
        pytest.skip("Chromium is not installed: sudo apt-get install chromium "
                    "(scripts/install_system_deps.sh does it on Debian/Ubuntu)")
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from grader_testkit import require_bwrap

    require_bwrap()
    running = Hub(tmp_path_factory.mktemp("hub-browser"))
    yield running
    running.stop()


class Shots:
    def __init__(self, folder: Path):
        self.folder, self.count = folder, 0
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, page, name):
        self.count += 1
        page.screenshot(path=str(self.folder / f"{self.count:02d}-{name}.png"))


def login(browser, hub, name, shots):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(120_000)
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    shots(page, f"{name}-login")
    page.fill("#username_input", name)
    page.fill("#password_input", hub.passwords[name])
    page.click("#login_submit")
    return page


def formgrader(page, hub):
    page.goto(f"{hub.url}/services/{COURSE}/formgrader")
    page.wait_for_selector("td.assign a")


def formgrader_action(page, selector, shots, name):
    """Click an action of the formgrader and close its success dialog (fail on an error one)."""
    page.click(selector)
    page.wait_for_selector("#success-modal, #error-modal", state="visible", timeout=300_000)
    shots(page, name)
    assert page.locator("#error-modal").count() == 0, page.inner_text("#error-modal")
    page.click("#success-modal .modal-footer button")
    page.wait_for_selector("#success-modal", state="detached")


def open_lab(page, name):
    page.wait_for_url(f"**/user/{name}/lab**", timeout=240_000)
    page.wait_for_selector("#jp-main-dock-panel")
    page.wait_for_selector(".jp-DirListing-content")


def menu(page, top, item):
    page.locator(".lm-MenuBar-itemLabel").filter(has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile(f"^{item}$")).click()


def open_assignments(page):
    menu(page, "Nbgrader", "Assignment List")
    page.wait_for_selector("#released_assignments_list")


def validate_in_panel(page, shots, shot, course, assignment, timeout=180_000):
    """Press an assignment's Validate button in the Assignments panel; the dialog's text."""
    page.locator(f"#nbgrader-{course}-{assignment} button", has_text="Validate").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(state="visible", timeout=timeout)
    text = dialog.inner_text()
    shots(page, shot)
    page.locator(".jp-Dialog button").last.click()
    return text


def submit_in_panel(page, shots, shot):
    page.locator("#fetched_assignments_list button", has_text="Submit").click()
    page.wait_for_selector("#submitted_assignments_list .list_item")
    shots(page, shot)


def fetch_feedback_in_panel(page, shots, shot):
    page.locator("#submitted_assignments_list button", has_text="Fetch Feedback").click()
    page.wait_for_selector("#submitted_assignments_list a:has-text('view feedback')")
    shots(page, shot)


def set_cell(page, marker, source):
    """Replace the source of the code cell showing `marker`, typed into its editor."""
    editor = page.locator(".jp-Notebook .jp-CodeCell", has_text=marker).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(source)


def set_markdown(page, marker, text):
    """Write the answer of the markdown cell showing `marker` (double-click opens its editor)."""
    cell = page.locator(".jp-Notebook .jp-MarkdownCell", has_text=marker)
    cell.dblclick()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def kernel_idle(page):
    """The status bar says the notebook's kernel is idle (started, and not running a cell)."""
    page.wait_for_function("() => /\\|\\s*Idle/.test(document.querySelector('#jp-main-statusbar')"
                           "?.textContent || '')", timeout=180_000)


def tamper_through_the_file(page, name):
    """What the notebook editor does not allow (the test cells are locked): rewrite the
    file itself, through the server's contents API, as any script in the lab could."""
    return page.evaluate("""async ([user, path]) => {
        const xsrf = document.cookie.split('; ').find(c => c.startsWith('_xsrf='))?.split('=')[1];
        const url = `/user/${user}/api/contents/${path}`;
        const headers = {'X-XSRFToken': decodeURIComponent(xsrf || ''), 'Content-Type': 'application/json'};
        const model = await (await fetch(url, {headers})).json();
        const cells = model.content.cells;
        const byId = id => cells.find(c => (c.metadata.nbgrader || {}).grade_id === id);
        byId('add').source = 'def add(a, b):\\n    return a + b';
        byId('mean').source = 'def mean(xs):\\n    return 0';
        byId('test_mean_visible').source = 'pass';
        cells.splice(cells.indexOf(byId('test_mean_hidden')), 1);
        const put = await fetch(url, {method: 'PUT', headers,
            body: JSON.stringify({type: 'notebook', format: 'json', content: model.content})});
        return put.status;
    }""", [name, f"{COURSE}/ps1/ps1.ipynb"])


def student_submits(browser, hub, shots, name, kind):
    page = login(browser, hub, name, shots)
    try:
        return _student_submits(page, hub, shots, name, kind)
    except Exception:
        shots(page, f"{name}-FAILED")  # what the page showed when it went wrong
        raise


def _student_submits(page, hub, shots, name, kind):
    open_lab(page, name)
    open_assignments(page)
    shots(page, f"{name}-assignments")
    page.locator("#released_assignments_list button", has_text="Fetch").click()
    page.wait_for_selector("#fetched_assignments_list button:has-text('Submit')")
    shots(page, f"{name}-fetched")
    if kind == "tamper":
        assert tamper_through_the_file(page, name) == 200
    # open the notebook from the panel's list of the assignment's notebooks
    page.locator("#fetched_assignments_list a.assignment-notebooks-link").click()
    page.locator("#nbgrader-dlsys-ps1 .nested_list_item a", has_text="ps1").click()
    page.wait_for_selector(".jp-Notebook .jp-CodeCell")
    if kind != "tamper":
        set_cell(page, "def add(", ADD)
        set_cell(page, "def mean(", MEAN if kind == "correct" else "def mean(xs):\n    return 2")
        set_markdown(page, "YOUR ANSWER HERE", "Because `len([])` is 0.")
    kernel_idle(page)
    menu(page, "Run", "Run All Cells")
    # the run is over: the first code cell has its count, none is still waiting ([*]) and
    # the kernel is idle (after a failing cell, the later ones are not run)
    page.wait_for_function(r"""() => {
        const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
        return prompts.length > 0 && /\[\d+\]/.test(prompts[0].textContent)
            && !prompts.some(p => p.textContent.includes('*'));
    }""", timeout=180_000)
    kernel_idle(page)
    shots(page, f"{name}-ran-all")
    page.keyboard.press("Control+S")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')")
    # validate from the Assignments panel, as the student sees it before submitting
    page.locator(".lm-TabBar-tabLabel", has_text="Assignments").click()
    validation = validate_in_panel(page, shots, f"{name}-validated", COURSE, "ps1")
    submit_in_panel(page, shots, f"{name}-submitted")
    page.context.close()
    return validation


def test_a_class_in_the_browser(browser, hub, tmp_path_factory):
    start = time.monotonic()
    shots = Shots(Path(os.environ.get("NK_SCREENSHOTS") or tmp_path_factory.mktemp("hub-screenshots")))

    # the instructor releases ps1 from the formgrader, opened in a tab of its own
    teacher = login(browser, hub, "instructor", shots)
    teacher.wait_for_url("**/user/instructor/**", timeout=240_000)
    formgrader(teacher, hub)
    shots(teacher, "instructor-formgrader")
    formgrader_action(teacher, "td.assign a", shots, "instructor-generated")
    formgrader_action(teacher, "td.release a", shots, "instructor-released")

    validations = {name: student_submits(browser, hub, shots, name, kind)
                   for name, kind in (("alice", "correct"), ("bob", "partial"), ("tess", "tamper"))}
    assert "Success" in validations["alice"], validations["alice"]
    assert "failed" in validations["bob"], validations["bob"]

    # the deadline passes: set in the formgrader's dialog, in UTC
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    teacher.click("td.edit a")
    teacher.fill("input.modal-duedate", now.strftime("%Y-%m-%dT%H:%M:%S"))
    teacher.fill("input.modal-timezone", "UTC")
    teacher.click("#edit-assignment-modal button.save")
    teacher.wait_for_selector("#edit-assignment-modal", state="detached")
    formgrader_action(teacher, "td.collect a", shots, "instructor-collected")
    teacher.click("td.num-submissions a")
    teacher.wait_for_selector("td.autograde a")
    shots(teacher, "instructor-submissions")
    for row in range(teacher.locator("td.autograde a").count()):
        formgrader_action(teacher, f"tr:nth-child({row + 1}) td.autograde a", shots, f"instructor-autograded-{row + 1}")
    teacher.reload()
    teacher.wait_for_selector("td.score")
    shots(teacher, "instructor-scores")
    scores = {}
    for line in teacher.locator("tbody tr").all():
        student = line.locator("td.student-id").inner_text().strip()
        scores[student] = float(line.locator("td.score").inner_text().split("/")[0].strip())
    assert scores == {"alice": 5, "bob": 3, "tess": 2}, scores
    formgrader(teacher, hub)
    formgrader_action(teacher, "td.generate-feedback a", shots, "instructor-feedback-generated")
    formgrader_action(teacher, "td.release-feedback a", shots, "instructor-feedback-released")

    # solutions: nbgrader has no button for them; the instructor releases them with
    # `grader solutions` in the course folder (refused before the due date)
    env = {**hub.env, "PYTHONPATH": str(REPO)}
    released = subprocess.run([sys.executable, "-m", "grader", "solutions", "ps1"], cwd=hub.course_dir,
                              env=env, capture_output=True, text=True, timeout=300)
    assert released.returncode == 0, released.stdout + released.stderr

    # a student fetches the feedback and the solutions from the Assignments panel
    page = login(browser, hub, "alice", shots)
    open_lab(page, "alice")
    open_assignments(page)
    fetch_feedback_in_panel(page, shots, "alice-feedback-fetched")
    page.locator("#released_assignments_list .list_item", has_text="ps1-solution").locator(
        "button", has_text="Fetch").click()
    page.wait_for_selector("#fetched_assignments_list .list_item:has-text('ps1-solution')")
    shots(page, "alice-solutions-fetched")
    feedback = list((hub.state / "homes" / "alice" / COURSE / "ps1" / "feedback").rglob("ps1.html"))
    assert feedback and "SECRET_" not in feedback[0].read_text()
    solution = hub.state / "homes" / "alice" / COURSE / "ps1-solution" / "ps1.ipynb"
    assert "return sum(xs) / len(xs)" in solution.read_text()
    page.goto(f"{hub.url}/user/alice/files/{COURSE}/ps1/feedback/"
              + feedback[0].relative_to(feedback[0].parents[1]).as_posix())
    shots(page, "alice-feedback-page")
    page.context.close()

    # the exported grades are the formgrader's scores
    grades = hub.root / "grades.csv"
    exported = subprocess.run([sys.executable, "-m", "grader", "export", "ps1", "--to", grades],
                              cwd=hub.course_dir, env=env, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    with open(grades, newline="") as fh:
        rows = {row.get("student_id") or row.get("id"): row for row in csv.DictReader(fh)}
    assert {s: float(rows[s]["score"]) for s in scores} == scores, rows
    modes = {json.loads(p.read_text())["mode"] for p in (hub.course_dir / ".grader" / "executions").glob("*.json")}
    assert modes == {"bwrap"}
    print(f"\nmeasured: the hub's browser flow (instructor, 3 students) took {time.monotonic() - start:.1f} s; "
          f"{shots.count} screenshots in {shots.folder}")
