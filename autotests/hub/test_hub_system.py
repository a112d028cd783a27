"""A real class on one server, as a newcomer sets it up, driven in Chromium (root only).

A fresh clone of this checkout's HEAD in /opt, and there, as root, what the README's
"A class on one machine" asks: `make setup PYTHON=/usr/bin/python3`, `make hub-users`
with a roster of an instructor, a TA and two students (and DATA, the data sets shared
with every account), `make hub`. Then, through the hub's login page:

- the instructor's formgrader lists every assignment of the course; the instructor
  generates hw0 (the course's own) and releases it;
- a student finds the lectures pulled into her home, fetches hw0 from the Assignments
  panel, answers it (the instructor's solution, written through her server), validates
  and submits; a second student answers two of its five tasks, validates (and is told
  what fails) and submits;
- from the first student's running kernel: her server runs as her account, reads the
  shared MNIST, and cannot read another student's home, the course folder (source
  notebooks, gradebook), the checkout's source notebooks and history, the other
  submissions in the exchange, nor the hub's state, tokens, cookie secret and password
  sheet (test_hub_users.py proves the modes `make hub-users` sets; this proves the
  denials from a student's own process);
- the instructor collects, autogrades (in the bubblewrap sandbox), generates and
  releases feedback; each student fetches theirs; the hub is stopped as a crash or an
  update stops it and started again, and the first student's server, with the kernel she
  had running, is still there; `grader export`, run as the grader account, writes the
  formgrader's scores.

Everything made is removed at the end, failed or not: the accounts and their
processes, the hub, the clone and the folders under /srv. The class is the committed
HEAD (uncommitted changes are not in a clone); NK_CLASS_CLONE=DIR runs on a clone made
before (with its .venv), which is kept. Screenshots go to NK_SCREENSHOTS (else a
temporary folder, printed).
"""

import csv
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from hub_testkit import REPO, Hub, free_base_port, remove_accounts
from test_hub_browser import (Shots, browser, fetch_feedback_in_panel, login, open_assignments,  # noqa: F401
                              open_lab, submit_in_panel, validate_in_panel)

pytestmark = pytest.mark.slow
COURSE = "nksys"
TEACHER, TA, ALICE, BOB = "nks-teacher", "nks-ta", "nks-alice", "nks-bob"
GRADER = f"grader-{COURSE}"
ACCOUNTS = [TEACHER, TA, ALICE, BOB, GRADER]
# bob answers these tasks of hw0 (4 of its 15 points), alice all five
BOB_TASKS = ("hw0_t1", "hw0_t2")
POINTS = {ALICE: 15.0, BOB: 4.0}
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def newcomer_env():
    """Root's environment without this checkout's interpreter, virtual environment or
    Jupyter settings: what `make` sees on a fresh machine (the package index settings stay)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "NBGRADER", "PYTHON", "VIRTUAL_ENV", "NEEDLE", "NK_", "PYTEST"))}
    return {**env, "PATH": SYSTEM_PATH, "HOME": pwd.getpwuid(0).pw_dir, "LANG": "C.UTF-8"}


def make(clone, *args, timeout):
    done = subprocess.run(["make", "-C", str(clone), *args], env=newcomer_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"make {' '.join(args)}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
    return done.stdout


def shared_data(root: Path) -> Path:
    """The data sets to share: $NEEDLE_DATA_DIR when it holds MNIST's test files, else
    files in the same format written here (what is proven is that students read them)."""
    given = os.environ.get("NEEDLE_DATA_DIR")
    if given and (Path(given) / "mnist" / "t10k-images-idx3-ubyte.gz").is_file():
        return Path(given)
    from needle_kernels.data.synthetic import write_mnist

    write_mnist(root / "data" / "mnist", "t10k", n=400, seed=0)
    return root / "data"


class MadeHub(Hub):
    """`make hub` in the clone, as root, on free ports."""

    def __init__(self, clone: Path, state: Path, exchange: Path, variables: list):
        self.root, self.state, self.exchange, self.admin = state.parent, state, exchange, TEACHER
        self.port = free_base_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = ["make", "-C", str(clone), "hub", f"HUB_PORT={self.port}", *variables]
        self.env = newcomer_env()
        with open(state / "initial-passwords.csv") as fh:
            self.passwords = dict(csv.reader(fh))
        self.log_path = state.parent / "hub.log"
        self.log = open(self.log_path, "a")
        self.start()

    def signal(self, sig):
        # make and the hub it runs share the process group make leads
        os.killpg(self.proc.pid, sig)


@pytest.fixture(scope="module")
def system_class(tmp_path_factory):
    pytest.importorskip("jupyterhub", reason="JupyterHub is not installed (pip install -e '.[hub]')")
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("real accounts need root, useradd and runuser")
    from grader_testkit import require_bwrap

    require_bwrap()
    taken = [n for n in ACCOUNTS if _exists(n)]
    assert not taken, f"accounts {taken} exist already (another run of this test, or left by one)"
    given = os.environ.get("NK_CLASS_CLONE")
    root = Path(tempfile.mkdtemp(prefix="nks-class-", dir="/opt"))
    Path("/srv").mkdir(exist_ok=True)
    srv = Path(tempfile.mkdtemp(prefix="nks-class-", dir="/srv"))
    hub = None
    try:
        for folder in (root, srv):
            os.chmod(folder, 0o755)  # mkdtemp's 0700 would shut every account out
        clone = Path(given) if given else root / "dlsys"
        start = time.monotonic()
        if not given:
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=300)
            make(clone, "setup", "PYTHON=/usr/bin/python3", timeout=1200)
        took_setup = time.monotonic() - start
        roster = root / "roster.csv"
        roster.write_text("username,role,first_name,last_name,email\n"
                          f"{TEACHER},instructor,Ada,L,\n{TA},ta,Alan,T,\n{ALICE},student,Alice,A,\n"
                          f"{BOB},student,Bob,B,\n")
        os.chmod(roster, 0o644)
        state, exchange = srv / "hub", srv / "exchange"
        variables = [f"ROSTER={roster}", f"COURSE={COURSE}", f"HUB_STATE={state}", f"HUB_EXCHANGE={exchange}"]
        start = time.monotonic()
        made = make(clone, "hub-users", "ASSIGNMENTS=none", f"DATA={shared_data(root)}", *variables, timeout=600)
        print(f"\nmeasured: make setup {took_setup:.0f} s, make hub-users {time.monotonic() - start:.0f} s:\n{made}")
        hub = MadeHub(clone, state, exchange, variables)
        hub.clone = clone
        hub.course_dir = Path(pwd.getpwnam(GRADER).pw_dir) / COURSE
        hub.python = clone / ".venv" / "bin" / "python"
        yield hub
    finally:
        try:
            if hub is not None:
                hub.stop()
                kept = tmp_path_factory.mktemp("hub-system") / "hub.log"
                kept.write_bytes(hub.log_path.read_bytes())
                print(f"the hub's log: {kept}")
        finally:
            remove_accounts(ACCOUNTS)
            subprocess.run(["rm", "-rf", str(root), str(srv)])


def _exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def row(page, assignment):
    """The formgrader's table row of `assignment`."""
    return page.locator("tbody tr", has=page.locator("td.name", has_text=re.compile(f"^\\s*{assignment}\\s*$")))


def formgrader(page, hub):
    page.goto(f"{hub.url}/services/{COURSE}/formgrader")
    page.wait_for_selector("td.assign a")


def formgrader_action(page, link, shots, name, timeout=900_000):
    """Click an action of the formgrader and close its success dialog (fail on an error one);
    autograding hw0 runs the whole notebook in the sandbox."""
    link.click()
    page.wait_for_selector("#success-modal, #error-modal", state="visible", timeout=timeout)
    if page.locator("#error-modal").count():
        shots(page, f"{name}-FAILED")
        pytest.fail(page.inner_text("#error-modal"))
    page.click("#success-modal .modal-footer button")
    page.wait_for_selector("#success-modal", state="detached")
    # the table as the action left it, once the dialog has faded out
    page.wait_for_selector(".modal-backdrop", state="detached")
    shots(page, name)


def answered(hub, s, tasks):
    """The student's fetched hw0 with the instructor's solution of `tasks` in its answer cells."""
    import nbformat

    source = nbformat.read(str(hub.course_dir / "source" / "hw0" / "hw0.ipynb"), as_version=4)
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    nb = hub.call(s, "GET", f"/user/{s.name}/api/contents/{COURSE}/hw0/hw0.ipynb")["content"]
    answers = 0
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if grade_id in solutions and grade_id.startswith(tasks):
            cell["source"] = "\n".join(line for line in solutions[grade_id].splitlines()
                                       if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
            answers += 1
    assert answers, f"no answer cell of {tasks} in {s.name}'s hw0"
    return nb


def run_in_kernel(hub, s, kernel_id, code, timeout=300):
    """Run `code` in a kernel of the user's server (its websocket, as JupyterLab does); its output."""
    import websocket

    ws_url = hub.url.replace("http", "ws") + f"/user/{s.name}/api/kernels/{kernel_id}/channels"
    ws = websocket.create_connection(ws_url, header=[f"Authorization: {s.headers['Authorization']}"],
                                     timeout=timeout)
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": s.name,
                                   "session": uuid.uuid4().hex, "version": "5.3"},
                        "parent_header": {}, "metadata": {}, "channel": "shell",
                        "content": {"code": code, "silent": False, "store_history": False,
                                    "user_expressions": {}, "allow_stdin": False}}))
    out = []
    try:
        while True:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(out)
    finally:
        ws.close()


def closed_paths(hub):
    """What a student must not read: another student's home and work, the course (its
    source notebooks and gradebook), the checkout's source notebooks and history, the
    exchange's submissions, the hub's state, tokens, cookie secret and password sheet."""
    state, course = hub.state, hub.course_dir
    paths = [f"/home/{BOB}", f"/home/{BOB}/{COURSE}/hw0/hw0.ipynb", course, course / "gradebook.db",
             course / "source" / "hw0" / "hw0.ipynb", course / "submitted",
             hub.clone / "course" / "assignments" / "hw0" / "hw0.ipynb", hub.clone / ".git" / "HEAD",
             hub.exchange / COURSE / "inbound",
             state / "hub-settings.json", state / "jupyterhub.sqlite", state / "service-token",
             state / "culler-token", state / "jupyterhub_cookie_secret", state / "initial-passwords.csv"]
    missing = [str(p) for p in paths if not Path(p).exists()]
    assert not missing, f"not there to be tried: {missing}"
    return [str(p) for p in paths]


def student_probe(hub, paths):
    """What a student's kernel runs: who it is, the shared data, and each closed path tried."""
    return (
        "import json, os, pwd, contextlib, io\nfound = {}\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(1)\n"
        "        found[path] = 'read'\n"
        "    except OSError as err:\n"
        "        found[path] = type(err).__name__\n"
        "import needle_kernels as ndl\n"
        "from needle_kernels.backend_ndarray import ndarray_backend_cpu\n"
        "said = io.StringIO()\n"
        "with contextlib.redirect_stdout(said):\n"
        "    X, y, _, _ = ndl.data.load_mnist_split(n_train=100, n_test=100)\n"
        "print(json.dumps({'closed': found, 'user': pwd.getpwuid(os.getuid()).pw_name,\n"
        "                  'data': os.environ.get('NEEDLE_DATA_DIR'), 'mnist': said.getvalue(),\n"
        "                  'shape': list(X.shape), 'threads': ndarray_backend_cpu.get_num_threads(),\n"
        "                  'spin': os.environ.get('GOMP_SPINCOUNT'),\n"
        f"                  'lectures': sorted(os.listdir(os.path.expanduser('~/{COURSE}/lectures')))}}))\n")


def resident_mb(user) -> dict:
    """{"server": MB, "kernel": MB}: the resident memory of the user's JupyterLab server and of
    their kernels, from /proc (the sizes the README's capacity figures are made of)."""
    uid, found = pwd.getpwnam(user).pw_uid, {"server": 0.0, "kernel": 0.0}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or proc.stat().st_uid != uid:
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            kb = next(int(line.split()[1]) for line in (proc / "status").read_text().splitlines()
                      if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        kind = "kernel" if "ipykernel" in command else "server" if "singleuser" in command else None
        if kind:
            found[kind] += kb / 1024
    return found


def student_answers(browser, hub, shots, name, tasks, validate):  # noqa: F811 - the fixture is a parameter
    page = login(browser, hub, name, shots)
    try:
        open_lab(page, name)
        if validate:
            # the lectures, pulled into her home when her server started
            page.goto(f"{hub.url}/user/{name}/lab/tree/{COURSE}/lectures")
            page.wait_for_selector(".jp-DirListing-item:has-text('02_softmax_regression.ipynb')")
            shots(page, f"{name}-lectures")
        open_assignments(page)
        page.locator("#released_assignments_list button", has_text="Fetch").click()
        page.wait_for_selector("#fetched_assignments_list button:has-text('Submit')")
        shots(page, f"{name}-fetched")
        s = hub.session(name)
        hub.call(s, "PUT", f"/user/{name}/api/contents/{COURSE}/hw0/hw0.ipynb",
                 json={"type": "notebook", "format": "json", "content": answered(hub, s, tasks)})
        validation = None
        if validate:
            page.locator("#fetched_assignments_list a.assignment-notebooks-link").click()
            validation = validate_in_panel(page, shots, f"{name}-validated", COURSE, "hw0", timeout=600_000)
        submit_in_panel(page, shots, f"{name}-submitted")
        return validation
    except Exception:
        shots(page, f"{name}-FAILED")
        raise
    finally:
        page.context.close()


def test_a_class_on_one_server(browser, system_class, tmp_path_factory):  # noqa: F811
    hub, start = system_class, time.monotonic()
    shots = Shots(Path(os.environ.get("NK_SCREENSHOTS") or tmp_path_factory.mktemp("hub-system-screenshots")))
    everything = sorted(p.name for p in (hub.clone / "course" / "assignments").iterdir()
                        if (p / f"{p.name}.ipynb").exists())

    # the formgrader lists the whole course; the instructor generates and releases hw0
    teacher = login(browser, hub, TEACHER, shots)
    try:
        teacher.wait_for_url(f"**/user/{TEACHER}/**", timeout=240_000)
        formgrader(teacher, hub)
        teacher.wait_for_selector("td.name:has-text('hw0')")
        shots(teacher, "instructor-formgrader")
        listed = sorted(t.strip() for t in teacher.locator("td.name").all_inner_texts())
        assert listed == everything, listed
        formgrader_action(teacher, row(teacher, "hw0").locator("td.assign a"), shots, "instructor-generated")
        formgrader_action(teacher, row(teacher, "hw0").locator("td.release a"), shots, "instructor-released")
    except Exception:
        shots(teacher, "instructor-FAILED")
        raise

    validation = student_answers(browser, hub, shots, ALICE, ("hw0_",), validate=True)
    assert "Success" in validation, validation
    told = student_answers(browser, hub, shots, BOB, BOB_TASKS, validate=True)
    assert "Success" not in told and "failed" in told.lower(), told

    # from inside alice's running kernel: her account, the shared data, and what is closed
    alice = hub.session(ALICE)
    kernel = hub.call(alice, "POST", f"/user/{ALICE}/api/kernels", json={"name": "python3"})["id"]
    said = run_in_kernel(hub, alice, kernel, student_probe(hub, closed_paths(hub)))
    memory = resident_mb(ALICE)
    print(f"\nmeasured: a student's resident memory: JupyterLab server {memory['server']:.0f} MB, "
          f"a kernel that imported the library and read MNIST {memory['kernel']:.0f} MB")
    assert memory["server"] > 0 and memory["kernel"] > 0, memory
    hub.call(alice, "DELETE", f"/user/{ALICE}/api/kernels/{kernel}")
    seen = json.loads(said.strip().splitlines()[-1]) if said.strip().startswith("{") else pytest.fail(said)
    assert seen["user"] == ALICE
    assert seen["closed"] == {p: "PermissionError" for p in seen["closed"]}, seen["closed"]
    assert seen["data"] == str(hub.state / "data") and f"real MNIST {hub.state / 'data'}" in seen["mnist"], seen
    assert seen["shape"] == [100, 784]
    # her kernels compute on the threads the hub gives each user, not on every core
    settings = json.loads((hub.state / "hub-settings.json").read_text())
    assert seen["threads"] == settings["threads_per_user"] == max(1, (os.cpu_count() or 1) // 4), seen
    # whose idle threads give the cores back soon after a kernel, since other users' kernels need them
    assert seen["spin"] == "1000", seen
    assert "02_softmax_regression.ipynb" in seen["lectures"]
    lecture = Path(f"/home/{ALICE}/{COURSE}/lectures/02_softmax_regression.ipynb")
    assert lecture.stat().st_uid == pwd.getpwnam(ALICE).pw_uid
    # nbgrader lists her own submission only
    listed = hub.call(alice, "GET", f"/user/{ALICE}/assignments", params={"course_id": COURSE})
    assert {a.get("student_id", ALICE) for a in listed["value"] if a["status"] == "submitted"} == {ALICE}, listed

    # collect, autograde in the sandbox, scores, feedback
    try:
        formgrader(teacher, hub)
        formgrader_action(teacher, row(teacher, "hw0").locator("td.collect a"), shots, "instructor-collected")
        row(teacher, "hw0").locator("td.num-submissions a").click()
        teacher.wait_for_selector("td.autograde a")
        for i in range(teacher.locator("td.autograde a").count()):
            formgrader_action(teacher, teacher.locator(f"tbody tr:nth-child({i + 1}) td.autograde a"), shots,
                              f"instructor-autograded-{i + 1}")
        teacher.reload()
        teacher.wait_for_selector("td.score")
        shots(teacher, "instructor-scores")
        scores = {line.locator("td.student-id").inner_text().strip():
                  float(line.locator("td.score").inner_text().split("/")[0].strip())
                  for line in teacher.locator("tbody tr").all()}
        assert scores == POINTS, scores
        # the roster's names, which `make hub-users` put in the gradebook
        assert teacher.locator("tbody tr", has_text=BOB).locator("td.student-name").inner_text().strip() == "B, Bob"
        formgrader(teacher, hub)
        formgrader_action(teacher, row(teacher, "hw0").locator("td.generate-feedback a"), shots,
                          "instructor-feedback-generated")
        formgrader_action(teacher, row(teacher, "hw0").locator("td.release-feedback a"), shots,
                          "instructor-feedback-released")
    except Exception:
        shots(teacher, "instructor-FAILED")
        raise
    finally:
        teacher.context.close()

    for name in (ALICE, BOB):
        page = login(browser, hub, name, shots)
        open_lab(page, name)
        open_assignments(page)
        fetch_feedback_in_panel(page, shots, f"{name}-feedback-fetched")
        page.context.close()
        feedback = list(Path(f"/home/{name}/{COURSE}/hw0/feedback").rglob("hw0.html"))
        assert feedback and feedback[0].stat().st_uid == pwd.getpwnam(name).pw_uid

    # the hub stops (a crash, an update) and starts again: her server and its kernel stay
    alice = hub.session(ALICE)
    kernel = hub.call(alice, "POST", f"/user/{ALICE}/api/kernels", json={"name": "python3"})["id"]
    hub.restart()
    alice = hub.session(ALICE)
    assert kernel in {k["id"] for k in hub.call(alice, "GET", f"/user/{ALICE}/api/kernels")}, \
        "the restarted hub lost the student's running server"
    hub.call(alice, "DELETE", f"/user/{ALICE}/api/kernels/{kernel}")

    # the grades as `grader export` writes them, run as the grader account
    grades = Path(pwd.getpwnam(GRADER).pw_dir) / "grades.csv"
    exported = subprocess.run([shutil.which("runuser"), "-u", GRADER, "--", str(hub.python), "-m", "grader",
                               "export", "hw0", "--to", str(grades)], cwd=hub.course_dir, capture_output=True, text=True,
                              timeout=300, env={"PATH": f"{hub.python.parent}:{SYSTEM_PATH}",
                                                "PYTHONPATH": str(hub.clone), "HOME": str(grades.parent)})
    assert exported.returncode == 0, exported.stdout + exported.stderr
    with open(grades, newline="") as fh:
        rows = {r.get("student_id") or r.get("id"): r for r in csv.DictReader(fh)}
    assert {s: float(rows[s]["score"]) for s in POINTS} == POINTS, rows
    modes = {json.loads(p.read_text())["mode"] for p in (hub.course_dir / ".grader" / "executions").glob("*.json")}
    assert modes == {"bwrap"}, modes
    print(f"\nmeasured: the class (instructor, 2 students, hw0) took {time.monotonic() - start:.1f} s in the "
          f"browser; {shots.count} screenshots in {shots.folder}")

