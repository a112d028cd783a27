"""`make hub-users` run twice, the roster grown in between: real accounts (root only).

The first run makes the accounts with their initial passwords (which PAM, the hub's
login, accepts), the exchange and the course, as the grader account, on an exchange of
mode 1777; the second adds the new student only: the others' passwords, homes and the
course are left as they were. The checkout's source notebooks and history are closed to
other accounts.
"""

import hashlib
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from hub_testkit import REPO, class_machine_or_skip, remove_accounts, secret_modes

pytestmark = pytest.mark.slow
COURSE = "nktu"
FIRST = ["nkt-ada,instructor,Ada,L,", "nkt-bea,student,Bea,B,"]
ADDED = ["nkt-cy,student,Cy,C,"]


def shadow(name):
    for line in Path("/etc/shadow").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":")[1]
    return None


def users(python, root, lines):
    roster = root / "roster.csv"
    roster.write_text("username,role,first_name,last_name,email\n" + "\n".join(lines) + "\n")
    done = subprocess.run([str(python), str(REPO / "hub" / "users.py"), "--roster", str(roster),
                           "--course", COURSE, "--assignments", "none", "--state", str(root / "state"),
                           "--exchange", str(root / "exchange")],
                          capture_output=True, text=True, timeout=600, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_hub_users_twice_with_a_grown_roster():
    root = Path(tempfile.mkdtemp(prefix="nkt-users-", dir="/tmp"))
    names = ["nkt-ada", "nkt-bea", "nkt-cy", f"grader-{COURSE}"]
    modes = secret_modes()
    try:
        python = class_machine_or_skip(root)
        first = users(python, root, FIRST)
        assert "accounts created: nkt-ada, nkt-bea, grader-nktu" in first, first
        sheet = root / "state" / "initial-passwords.csv"
        assert stat.S_IMODE(sheet.stat().st_mode) == 0o600 and sheet.stat().st_uid == 0
        passwords = dict(line.split(",") for line in sheet.read_text().split())
        assert set(passwords) == {"nkt-ada", "nkt-bea"}
        import pamela

        pamela.authenticate("nkt-bea", passwords["nkt-bea"], service="login")
        with pytest.raises(pamela.PAMError):
            pamela.authenticate("nkt-bea", "not-her-password", service="login")
        assert shadow(f"grader-{COURSE}").startswith("!")  # no password: it cannot log in
        exchange = root / "exchange"
        assert stat.S_IMODE(exchange.stat().st_mode) == 0o1777
        course = Path(f"/home/grader-{COURSE}") / COURSE
        config = (course / "nbgrader_config.py").read_text()
        assert "'needle_kernels', 'coursekit'" in config
        assert course.stat().st_uid == int(subprocess.run(["id", "-u", f"grader-{COURSE}"], capture_output=True,
                                                          text=True).stdout)
        for home in ("/home/nkt-ada", "/home/nkt-bea", f"/home/grader-{COURSE}"):
            assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
        for secret in (REPO / "course" / "assignments", REPO / ".git"):
            assert not secret.stat().st_mode & 0o077, secret
        assert (REPO / "needle_kernels").stat().st_mode & 0o005 == 0o005
        (Path("/home/nkt-bea") / "work.txt").write_text("mine")
        before = {n: shadow(n) for n in ("nkt-ada", "nkt-bea")}
        config_hash = hashlib.sha256(config.encode()).hexdigest()

        second = users(python, root, FIRST + ADDED)
        assert "accounts created: nkt-cy" in second, second
        assert {n: shadow(n) for n in ("nkt-ada", "nkt-bea")} == before
        assert (Path("/home/nkt-bea") / "work.txt").read_text() == "mine"
        assert hashlib.sha256((course / "nbgrader_config.py").read_bytes()).hexdigest() == config_hash
        lines = sheet.read_text().split()
        assert [line.split(",")[0] for line in lines] == ["nkt-ada", "nkt-bea", "nkt-cy"]
        pamela.authenticate("nkt-cy", lines[-1].split(",")[1], service="login")
        third = users(python, root, FIRST + ADDED)
        assert "accounts created: none (all existed)" in third
    finally:
        remove_accounts(names)
        for path, mode in modes.items():
            os.chmod(path, mode)
        subprocess.run(["rm", "-rf", str(root)])
