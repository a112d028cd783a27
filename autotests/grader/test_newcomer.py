"""A newcomer's machine: a fresh clone under /tmp, its interpreter there too.

Both failed once: bubblewrap's private /tmp hid an interpreter living under /tmp (so
grading fell back to `unshare`), and `make lab` stopped at once when run as root.
The clone gets a virtual environment of its own under /tmp, layered on this
checkout's installed packages by a `.pth` file (installing them again would take
minutes and a network), so the sandbox really starts an interpreter from /tmp.
"""

import datetime
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from grader_testkit import FIXTURES, REPO, gradebook_scores, require_bwrap
from simulated_class import correct, partial, write_submission

pytestmark = pytest.mark.slow
COURSE_ID = "dlsys"


@pytest.fixture(scope="module")
def newcomer():
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    # /tmp itself, not $TMPDIR: the private /tmp of the sandbox is what once hid the interpreter
    root = Path(tempfile.mkdtemp(prefix="newcomer-", dir="/tmp"))
    clone = root / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    venv = clone / ".venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                    str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "installed-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # the console script pip would have written for jupyter, run by the clone's interpreter
    jupyter = venv / "bin" / "jupyter"
    jupyter.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom jupyter_core.command import main\n"
                       "sys.exit(main())\n")
    jupyter.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def clone_env(root, home):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "NBGRADER", "PYTHON", "VIRTUAL_ENV", "DISPLAY", "WAYLAND"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PYTHONPATH=str(root / "clone"), PYTHONDONTWRITEBYTECODE="1",
               # the other console scripts (nbgrader runs `alembic`) come with the layered packages
               PATH=os.pathsep.join([str(root / "clone" / ".venv" / "bin"), os.path.dirname(sys.executable),
                                     env.get("PATH", "/usr/bin:/bin")]))
    return env


def run(root, args, cwd, home, timeout=600):
    proc = subprocess.run([str(root / "clone" / ".venv" / "bin" / "python"), *map(str, args)],
                          cwd=str(cwd), env=clone_env(root, home), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_fresh_clone_under_tmp_grades_in_bubblewrap(newcomer):
    require_bwrap()
    start = time.monotonic()
    home, course, exchange = newcomer / "home", newcomer / "course", newcomer / "exchange"
    where = run(newcomer, ["-c", "import sys, grader; print(sys.prefix); print(grader.__file__)"],
                newcomer, home)
    prefix, package = where.split()
    assert prefix == str(newcomer / "clone" / ".venv") and package.startswith(str(newcomer / "clone"))

    grader = ["-m", "grader"]
    run(newcomer, grader + ["init", course, "--course-id", COURSE_ID, "--exchange", exchange], newcomer, home)
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("c.Execute.timeout = 10\nc.Sandbox.mode = 'bwrap'\nc.ExchangeCollect.check_owner = False\n")
    doctor = run(newcomer, grader + ["doctor"], course, home)
    assert "active: bwrap" in doctor, doctor
    (course / "source" / "ps1").mkdir(parents=True)
    shutil.copy(FIXTURES / "ps1" / "ps1.ipynb", course / "source" / "ps1" / "ps1.ipynb")
    tomorrow = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).isoformat()
    run(newcomer, grader + ["generate", "ps1", "--due", tomorrow], course, home)
    run(newcomer, grader + ["release", "ps1"], course, home)
    for name, make in (("ada", correct), ("bob", partial)):
        folder = newcomer / "students" / name
        folder.mkdir(parents=True)
        common = ["--course-id", COURSE_ID, "--exchange", exchange, "--student", name]
        run(newcomer, grader + ["fetch", "ps1", *common], folder, folder)
        write_submission(make, folder / "ps1" / "ps1.ipynb", {})
        run(newcomer, grader + ["submit", "ps1", *common], folder, folder)
    run(newcomer, grader + ["collect", "ps1"], course, home)
    report = run(newcomer, grader + ["autograde", "ps1", "-j", "2"], course, home)
    assert "sandbox bwrap" in report, report
    scores = gradebook_scores(course, "ps1")
    assert (scores["ada"]["_raw"], scores["bob"]["_raw"]) == (5, 3), report
    print(f"\nmeasured: a fresh clone under /tmp graded 2 submissions in bubblewrap in "
          f"{time.monotonic() - start:.1f} s")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_make_lab_serves_the_course_as_root(newcomer):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    port, token = free_port(), "newcomer-token"
    env = clone_env(newcomer, newcomer / "lab-home")
    env["JUPYTER_TOKEN"] = token
    # `-o setup`: the kernels' build and install are what `make test` runs; this checks the
    # server start a newcomer sees (root, no display) with the clone's own Makefile
    proc = subprocess.Popen(["make", "-o", "setup", "lab", f"PORT={port}"], cwd=str(newcomer / "clone"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline, page = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=5) as resp:
                    page = (resp.status, resp.read().decode())
                    break
            except OSError:
                time.sleep(0.5)
    finally:
        try:
            os.killpg(proc.pid, 15)
        except ProcessLookupError:
            pass  # it stopped by itself; its output says why
        output = proc.communicate(timeout=30)[0]
    assert page is not None, f"`make lab` never served /lab:\n{output}"
    assert page[0] == 200 and "JupyterLab" in page[1]
    assert "--no-browser" in output, "with no display, no browser is launched"
    if os.geteuid() == 0:
        assert "running as root: JupyterLab is started with --allow-root" in output
        assert "--allow-root" in output
