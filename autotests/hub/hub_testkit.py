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


class Hub:
    def __init__(self, root: Path):
        self.root, self.state = root, root / "state"
        self.port = free_base_port()
        self.url = f"http://127.0.0.1:{self.port}"
        roster = root / "roster.csv"
        roster.write_text("username,role,first_name,last_name,email\n"
                          "instructor,instructor,Ada,Lovelace,\nta,ta,Alan,Turing,\n"
                          "alice,student,Alice,A,\nbob,student,Bob,B,\ntess,student,Tess,T,\n")
        self.argv = [sys.executable, str(REPO / "hub" / "launch.py"), "--roster", str(roster),
                     "--course", COURSE, "--port", str(self.port), "--state", str(self.state),
                     "--mode", "single"]
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
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.wait_up()

    def wait_up(self, timeout=240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the hub exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                # the hub answers once its services are up too
                if requests.get(f"{self.url}/hub/api/", timeout=5).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(1)
        raise AssertionError(f"the hub did not start in {timeout} s:\n{self.log_text()}")

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

    def stop(self):
        if self.proc.poll() is None:
            # the hub stops the servers it spawned and its course service on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
