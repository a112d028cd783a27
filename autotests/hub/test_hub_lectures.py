"""The lectures in a student's home, kept up to date, and idle servers culled: a hub in
single-account mode whose idle culler stops a server after 5 idle seconds.

The first start pulls the published lectures into ~/dlsys/lectures; the culler stops
the idle server; the student, meanwhile, has edited one lecture and deleted another;
the instructor publishes an update (two lectures changed, the edited one among them,
and a new one); the next start merges it: the new lecture and the other change arrive,
the student's edit is kept, the deleted lecture comes back.
"""

import subprocess
import time

import nbformat
import pytest

from hub_testkit import COURSE, Hub

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    pytest.importorskip("jupyterhub", reason="JupyterHub is not installed (pip install -e '.[hub]')")
    pytest.importorskip("jupyterhub_idle_culler", reason="jupyterhub-idle-culler is not installed")
    pytest.importorskip("nbgitpuller", reason="nbgitpuller is not installed")
    running = Hub(tmp_path_factory.mktemp("hub-lectures"), cull_idle=5)
    yield running
    running.stop()


def git(*args, cwd=None):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *map(str, args)],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def wait_for(what, check, hub, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(1)
    raise AssertionError(f"{what} did not happen in {timeout} s:\n{hub.log_text()}")


def test_lectures_pulled_kept_and_updated_and_idle_servers_culled(hub, tmp_path):
    lectures = hub.state / "homes" / "alice" / COURSE / "lectures"
    alice = hub.session("alice")

    def start():
        r = alice.post(f"{hub.url}/hub/api/users/alice/server", timeout=60)
        assert r.status_code in (201, 202), r.text

    def running():
        return bool(hub.call(alice, "GET", "/hub/api/users/alice")["servers"])

    start()
    wait_for("alice's server starting", running, hub)
    started = time.monotonic()
    assert "02_softmax_regression.ipynb" in {p.name for p in lectures.glob("*.ipynb")}
    culled = wait_for("the idle culler stopping alice's server", lambda: not running(), hub)

    # her edit of lecture 03 and her deletion of lecture 04, in her home
    mine = lectures / "03_manual_neural_networks.ipynb"
    nb = nbformat.read(str(mine), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("my own notes"))
    nbformat.write(nb, str(mine))
    (lectures / "04_automatic_differentiation.ipynb").unlink()

    # the instructor's update, in the repository the servers pull from
    work = tmp_path / "work"
    git("clone", "-q", hub.state / "lectures.git", work)
    for name, text in (("02_softmax_regression.ipynb", "an update of lecture 2"),
                       ("03_manual_neural_networks.ipynb", "an update of lecture 3")):
        updated = nbformat.read(str(work / name), as_version=4)
        updated.cells.insert(0, nbformat.v4.new_markdown_cell(text))
        nbformat.write(updated, str(work / name))
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("new")]),
                   str(work / "99_new_lecture.ipynb"))
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "update", cwd=work)
    git("push", "-q", "origin", "HEAD:main", cwd=work)

    start()  # the pull runs before the server does
    wait_for("the update reaching alice", lambda: (lectures / "99_new_lecture.ipynb").exists(), hub)
    assert "an update of lecture 2" in (lectures / "02_softmax_regression.ipynb").read_text()
    assert "my own notes" in mine.read_text()
    assert (lectures / "04_automatic_differentiation.ipynb").exists()
    print(f"\nmeasured: alice's idle server was culled {culled - started:.0f} s after it started")
