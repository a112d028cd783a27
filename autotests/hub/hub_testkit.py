"""A hub for the tests: `hub/launch.py` on free ports of 127.0.0.1, a fresh state folder,
the small ps1 assignment as the course's source, stopped (with every server) at the end."""

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "autotests" / "grader" / "fixtures"
sys.path.insert(0, str(REPO / "autotests" / "grader"))
COURSE = "dlsys"


def free_base_port():
    """A port p with p..p+3 free: the hub, its API, the proxy's API, the course service."""
    for base in range(21000 + os.getpid() % 997 * 20, 60000, 20):
        try:
            for port in range(base, base + 4):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no four free ports")


def wait_for_server(what, proc, url, log_text, timeout, interval=1.0, **params):
    """Until GET url (with query `params`) answers OK; an AssertionError with the server's log
    (`log_text()`) when `proc` exits or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited {proc.returncode}:\n{log_text()}")
        try:
            if requests.get(url, params=params, timeout=5).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(interval)
    raise AssertionError(f"{what} did not start in {timeout} s:\n{log_text()}")


class Hub:
    def __init__(self, root: Path, cull_idle=None):
        self.root, self.state = root, root / "state"
        self.port = free_base_port()
        self.url = f"http://127.0.0.1:{self.port}"
        roster = root / "roster.csv"
        roster.write_text("username,role,first_name,last_name,email\n"
                          "instructor,instructor,Ada,Lovelace,\nta,ta,Alan,Turing,\n"
                          "alice,student,Alice,A,\nbob,student,Bob,B,\ntess,student,Tess,T,\n")
        self.argv = [sys.executable, str(REPO / "hub" / "launch.py"), "--roster", str(roster),
                     "--course", COURSE, "--port", str(self.port), "--state", str(self.state),
                     "--mode", "single"] + (["--cull-idle", str(cull_idle)] if cull_idle else [])
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBGRADER"))},
                    "HOME": str(root / "home"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        (root / "home").mkdir()
        subprocess.run(self.argv + ["--prepare-only"], env=self.env, check=True, capture_output=True,
                       timeout=300)
        self.course_dir = self.state / "courses" / COURSE
        self.exchange = self.state / "exchange"
        (self.course_dir / "source" / "ps1").mkdir(parents=True)
        shutil.copy(FIXTURES / "ps1" / "ps1.ipynb", self.course_dir / "source" / "ps1" / "ps1.ipynb")
        with open(self.course_dir / "nbgrader_config.py", "a") as fh:
            fh.write("c.Execute.timeout = 10\nc.Sandbox.mode = 'bwrap'\n")
        with open(self.state / "initial-passwords.csv") as fh:
            self.passwords = dict(csv.reader(fh))
        self.log_path = root / "hub.log"
        self.log = open(self.log_path, "w")
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.wait_up()

    def wait_up(self, timeout=240):
        # the hub answers once its services are up too
        wait_for_server("the hub", self.proc, f"{self.url}/hub/api/", self.log_text, timeout)

    def log_text(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def session(self, name, password=None):
        """A logged-in browser-like session (cookies) with an API token of that user."""
        s = requests.Session()
        s.get(f"{self.url}/hub/login", timeout=30)
        r = s.post(f"{self.url}/hub/login", allow_redirects=False, timeout=60,
                   data={"username": name, "password": self.passwords[name] if password is None else password,
                         "_xsrf": s.cookies.get("_xsrf")})
        if r.status_code != 302:
            return None
        r = s.post(f"{self.url}/hub/api/users/{name}/tokens", json={"note": "test"}, timeout=30,
                   headers={"X-XSRFToken": s.cookies.get("_xsrf")})
        assert r.ok, r.text
        s.headers["Authorization"] = "token " + r.json()["token"]
        s.name = name
        return s

    def spawn(self, s, timeout=180):
        r = s.post(f"{self.url}/hub/api/users/{s.name}/server", timeout=60)
        assert r.status_code in (201, 202, 400), r.text  # 400: already running
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            user = s.get(f"{self.url}/hub/api/users/{s.name}", timeout=30).json()
            if user["servers"].get("", {}).get("ready"):
                return user
            time.sleep(1)
        raise AssertionError(f"{s.name}'s server did not start:\n{self.log_text()}")

    def call(self, s, method, path, **kw):
        r = s.request(method, self.url + path, timeout=600, **kw)
        assert r.ok, f"{s.name}: {method} {path} -> {r.status_code}: {r.text[:1500]}"
        return r.json() if r.text else None

    admin = "instructor"

    def stop_servers(self, timeout=120):
        """Stop every user's server through the hub: they outlive the hub itself."""
        if self.proc.poll() is not None:
            return
        s = self.session(self.admin)
        for user in self.call(s, "GET", "/hub/api/users"):
            if user["servers"]:
                s.delete(f"{self.url}/hub/api/users/{user['name']}/server", timeout=60)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(u["servers"] for u in self.call(s, "GET", "/hub/api/users")):
                return
            time.sleep(1)
        raise AssertionError(f"servers still running after {timeout} s:\n{self.log_text()}")

    def signal(self, sig):
        """Signal the hub; the hub stops the proxy and its services on SIGTERM itself (they
        run in sessions of their own)."""
        self.proc.send_signal(sig)

    def restart(self):
        """Stop the hub as a crash or an update stops it (its users' servers, in sessions of
        their own, keep running: `cleanup_servers = False`) and start it again."""
        self.signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.start()

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.stop_servers()
            finally:
                self.signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        self.log.close()


# ---- a class machine: real system accounts (root only) ---------------------------------

def everyone_can_run(path) -> bool:
    sys.path.insert(0, str(REPO / "hub"))
    from users import reachable_by_everyone

    return not reachable_by_everyone(path)


def shared_interpreter():
    """A Python of this version that every account can run: this one's base, or the system's."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in [getattr(sys, "_base_executable", ""), f"/usr/bin/python{version}"]:
        if candidate and os.path.exists(candidate) and everyone_can_run(candidate):
            out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True)
            if out.stdout.strip() == str(sys.version_info[:2]):
                return candidate
    return None


SCRIPTS = {"jupyterhub": "jupyterhub.app:main", "configurable-http-proxy": "configurable_http_proxy.cli:main",
           "alembic": "alembic.config:main", "jupyter": "jupyter_core.command:main",
           "jupyterhub-singleuser": "jupyterhub.singleuser:main"}


def class_machine_or_skip(root: Path) -> Path:
    """A virtual environment under `root` that every account can run (a class machine's
    checkout in /opt, as the README asks), layered on this one's packages by a `.pth` file:
    this checkout's own may live where other accounts cannot enter. Skips where real
    accounts cannot be made. Returns the environment's python."""
    import sysconfig

    import pytest

    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("real accounts need root, useradd and runuser")
    base = shared_interpreter()
    site = sysconfig.get_paths()["purelib"]
    if base is None or not everyone_can_run(site) or not everyone_can_run(REPO / "needle_kernels"):
        pytest.skip(f"no Python {sys.version_info[:2]} that every account can run, or {site} or "
                    f"{REPO} is closed to them (make the checkout world-readable, e.g. in /opt)")
    os.chmod(root, 0o755)
    venv = root / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    own_site = Path(subprocess.run([str(python), "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    # addsitedir, not a plain path line: the editable install's own .pth (its finder for
    # coursekit) is read only in a site directory
    (own_site / "installed-packages.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    # the server extensions this environment enables and the data JupyterLab serves, from
    # the one it is layered on; kernels left out (theirs would start that interpreter)
    shutil.copytree(Path(sys.prefix) / "etc" / "jupyter", venv / "etc" / "jupyter")
    data, own_data = Path(sys.prefix) / "share" / "jupyter", venv / "share" / "jupyter"
    (own_data / "lab" / "settings").mkdir(parents=True)
    for entry in data.iterdir():
        if entry.name not in ("kernels", "lab"):
            (own_data / entry.name).symlink_to(entry)
    for entry in (data / "lab").iterdir():
        if entry.name != "settings":
            (own_data / "lab" / entry.name).symlink_to(entry)
    for name, entry in SCRIPTS.items():
        module, func = entry.split(":")
        script = venv / "bin" / name
        script.write_text(f"#!{python}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
        script.chmod(0o755)
    return python


def remove_accounts(names):
    """Every process of these accounts ended (by process id), then the accounts and homes."""
    import pwd
    import signal as signals

    uids = {}
    for name in names:
        try:
            uids[pwd.getpwnam(name).pw_uid] = name
        except KeyError:
            pass
    for _ in range(2):
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if proc.stat().st_uid in uids:
                        os.kill(int(proc.name), signals.SIGKILL)
                except (OSError, ProcessLookupError):
                    pass
        time.sleep(0.5)
    for name in uids.values():
        subprocess.run(["userdel", "--remove", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)


def secret_modes():
    """The modes of the checkout's folders that `make hub-users` closes, to put back after."""
    return {p: p.stat().st_mode & 0o7777 for p in (REPO / "course" / "assignments", REPO / ".git") if p.exists()}
