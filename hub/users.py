"""`make hub-users` (as root): the system accounts and folders of a real multi-user hub.

    sudo python hub/users.py [--roster hub/roster.csv] [--course dlsys]

Creates, where missing: an account for every roster member and the course's grader
account `grader-COURSE`; the exchange /srv/nbgrader/exchange, world-writable with the
sticky bit as nbgrader requires (students drop submissions into it, none can remove
another's); the course folder in the grader account's home, made by `grader init` run
as that account. Passwords are not set here: give each account one (`passwd NAME`, or
`chpasswd` from a file) before the hub's PAM login can let them in.

Every account must be able to run the course's interpreter, so the virtual environment
cannot live in a folder only root can enter (such as /root): this is checked first.
"""

import argparse
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from launch import SYSTEM_EXCHANGE, read_roster  # noqa: E402


def reachable_by_everyone(path) -> str:
    """'' when every account can reach and run `path`, else the folder that stops them."""
    path = Path(path).resolve()
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat().st_mode
        needed = stat.S_IXOTH | (stat.S_IROTH if folder == path and folder.is_file() else 0)
        if mode & needed != needed:
            return str(folder)
    return ""


def ensure_account(name, home_mode=0o700):
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
        os.chmod(pwd.getpwnam(name).pw_dir, home_mode)
        return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--roster", default=str(HERE / "roster.csv"))
    parser.add_argument("--course", default="dlsys")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("creating system accounts needs root: sudo make hub-users")
    blocked = reachable_by_everyone(sys.executable)
    if blocked:
        raise SystemExit(f"{blocked} keeps other accounts from running {sys.executable} (or the "
                         "interpreter it was made from); make the checkout's .venv from a Python every "
                         "account can run (e.g. `make setup PYTHON=/usr/bin/python3`) in a folder every "
                         "account can read (e.g. /opt/dlsys)")
    roles, _ = read_roster(opts.roster)
    created = [n for group in roles.values() for n in group if ensure_account(n)]
    grader_account = f"grader-{opts.course}"
    if ensure_account(grader_account):
        created.append(grader_account)
    exchange = Path(SYSTEM_EXCHANGE)
    exchange.mkdir(parents=True, exist_ok=True)
    os.chmod(exchange, 0o1777)
    home = Path(pwd.getpwnam(grader_account).pw_dir)
    course_dir = home / opts.course
    if not (course_dir / "nbgrader_config.py").exists():
        subprocess.run(["runuser", "-u", grader_account, "--", sys.executable, "-m", "grader", "init",
                        str(course_dir), "--course-id", opts.course, "--exchange", str(exchange)],
                       cwd=str(home), check=True, env={**os.environ, "HOME": str(home),
                                                        "PYTHONPATH": str(HERE.parent)})
    print(f"accounts created: {', '.join(created) or 'none (all existed)'}")
    print(f"course folder: {course_dir} (owned by {grader_account}); exchange: {exchange} (mode 1777)")
    print("next: give each account a password (passwd NAME), then `sudo make hub`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
