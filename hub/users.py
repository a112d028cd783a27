"""`make hub-users` (as root): the system accounts, course and assignments of a real class.

    sudo python hub/users.py [--roster hub/roster.csv] [--course dlsys]
                             [--assignments all|none|hw0,hw1,...] [--state DIR] [--exchange DIR]
                             [--data DIR]

Run again after the roster grows: only what is missing is made, nothing else is touched.
- an account for every roster member who has none, with a random password appended to
  STATE/initial-passwords.csv (readable by root only; hand the passwords out, then delete
  the file; students change theirs with `passwd` in a JupyterLab terminal). Accounts that
  existed keep their password. The grader account `grader-COURSE` gets no password: it
  cannot log in, it only runs the formgrader and the autograder;
- the exchange (default /srv/nbgrader/exchange), mode 1777 as nbgrader requires: students
  drop submissions into it, the sticky bit keeps them from removing one another's;
- the course folder in the grader account's home, made by `grader init` as that account,
  whose sandbox shows `needle_kernels` and `coursekit` to the notebooks it grades, and
  the roster's students in its gradebook with their names (`grader roster`);
- every assignment of course/assignments/ not yet in the course's source/: copied there, so
  the formgrader lists the whole course; those chosen by --assignments (default all) are
  generated too (`grader generate`, which proves that the solution earns every point and
  the release none, in the grading sandbox) and listed ready to release; the instructor
  generates the others from the formgrader when they are due;
- the data the lectures read (MNIST, PTB, CIFAR-10): --data DIR (default
  $NEEDLE_DATA_DIR) copied to STATE/data, readable by every account and writable by
  none; `make hub` points each server's NEEDLE_DATA_DIR at it. Without it the lectures
  fall back to synthetic images and say so;
- the checkout's copies of what students must not read, closed to other accounts: the
  source notebooks (solutions, hidden tests) in course/assignments and the git history that
  holds them (.git). The rest of the checkout stays readable: every account runs its
  virtual environment and imports its packages.

Every account must be able to run the course's interpreter, so the virtual environment
cannot live in a folder only root can enter (such as /root): this is checked first.
"""

import argparse
import csv
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from launch import SYSTEM_EXCHANGE, SYSTEM_STATE, read_roster  # noqa: E402

ASSIGNMENTS = REPO / "course" / "assignments"
# in the checkout, readable by its owner only: what gives the answers away
SECRETS = [ASSIGNMENTS, REPO / ".git"]
PACKAGES = ["needle_kernels", "coursekit"]
# what `grader init` leaves at nbgrader's defaults and the course sets for itself: how a
# release is made, with answer stubs that name their task ("hw1_t3: not implemented yet");
# read from the checkout's course/nbgrader_config.py, so the two never differ
RELEASE_PIPELINE = """
# the course's own release pipeline (course/nbgrader_config.py): stubs that name their task
from traitlets.config.loader import PyFileConfigLoader as _Loader

_course = _Loader("nbgrader_config.py", path={course!r}).load_config()
c.GenerateAssignment.preprocessors = _course.GenerateAssignment.preprocessors
c.ClearSolutions.code_stub = _course.ClearSolutions.code_stub
"""


def reachable_by_everyone(path) -> str:
    """'' when every account can reach and read `path`, else the folder that stops them."""
    path = Path(path).resolve()
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat().st_mode
        needed = stat.S_IXOTH | (stat.S_IROTH if folder == path else 0)
        if folder.is_file():
            needed = stat.S_IROTH
        if mode & needed != needed:
            return str(folder)
    return ""


def ensure_account(name, password_sheet=None) -> bool:
    """Create `name` (home 0700) where missing; a new roster account gets a random password."""
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        pass
    subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name], check=True)
    os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
    if password_sheet is not None:
        password = secrets.token_urlsafe(9)
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
        fd = os.open(password_sheet, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(f"{name},{password}\n")
        os.chmod(password_sheet, 0o600)
    return True


def grader_tmp(account) -> str:
    """The grader account's own temporary folder: its grading jobs and sandbox slot locks
    stay out of the shared /tmp, where another account's files of the same name would
    stop it."""
    entry = pwd.getpwnam(account)
    tmp = Path(entry.pw_dir) / ".cache" / "grader-tmp"
    for folder in (tmp.parent, tmp):
        folder.mkdir(exist_ok=True)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    os.chmod(tmp, 0o700)
    return str(tmp)


def as_account(account, args, cwd, timeout=None):
    """Run `python -m grader ARGS` as `account`, in its home, with the checkout importable."""
    home = pwd.getpwnam(account).pw_dir
    env = {"HOME": home, "USER": account, "LOGNAME": account, "LANG": "C.UTF-8", "TMPDIR": grader_tmp(account),
           "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    runuser = shutil.which("runuser") or "runuser"
    return subprocess.run([runuser, "-u", account, "--", sys.executable, "-m", "grader", *map(str, args)],
                          cwd=str(cwd), env=env, timeout=timeout, text=True, capture_output=True)


def ensure_course(account, course_dir, course, exchange):
    if not (course_dir / "nbgrader_config.py").exists():
        made = as_account(account, ["init", course_dir, "--course-id", course, "--exchange", exchange,
                                    *[a for p in PACKAGES for a in ("--package", p)]], course_dir.parent)
        if made.returncode != 0:
            raise SystemExit(f"grader init failed as {account}:\n{made.stdout}{made.stderr}")
        add_release_pipeline(course_dir)
        return True
    # a course made before its packages were shown in the sandbox: add them, keep the rest
    sys.path.insert(0, str(REPO))
    from grader.course import load_course

    shown = list(load_course(course_dir).config.Sandbox.get("packages", []))
    if any(p not in shown for p in PACKAGES):
        with open(course_dir / "nbgrader_config.py", "a") as fh:
            fh.write("\n# what the course's assignments import, shown in the grading sandbox\n"
                     f"c.Sandbox.packages = {shown + [p for p in PACKAGES if p not in shown]!r}\n")
    add_release_pipeline(course_dir)
    return False


def add_release_pipeline(course_dir):
    config = course_dir / "nbgrader_config.py"
    if "c.GenerateAssignment.preprocessors" not in config.read_text():
        with open(config, "a") as fh:
            fh.write(RELEASE_PIPELINE.format(course=str(REPO / "course")))


def add_students(account, course_dir, rows) -> int:
    """The roster's students in the course's gradebook, with their names and emails:
    nbgrader would otherwise add each at their first submission, with no name."""
    students = [r for r in rows if r["role"] == "student"]
    if not students:
        return 0
    entry = pwd.getpwnam(account)
    listing = Path(grader_tmp(account)) / "roster.csv"
    with open(listing, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "first_name", "last_name", "email"])
        out.writerows([r["username"], r.get("first_name", ""), r.get("last_name", ""), r.get("email", "")]
                      for r in students)
    os.chown(listing, entry.pw_uid, entry.pw_gid)
    done = as_account(account, ["roster", listing], course_dir)
    listing.unlink()
    if done.returncode != 0:
        raise SystemExit(f"grader roster failed as {account}:\n{done.stdout}{done.stderr}")
    return len(students)


def chosen_assignments(spec) -> list:
    available = sorted(p.name for p in ASSIGNMENTS.iterdir() if (p / f"{p.name}.ipynb").exists())
    if spec == "all":
        return available
    if spec == "none":
        return []
    wanted = [a.strip() for a in spec.split(",") if a.strip()]
    unknown = [a for a in wanted if a not in available]
    if unknown:
        raise SystemExit(f"no such assignment in {ASSIGNMENTS}: {', '.join(unknown)}")
    return wanted


def copy_sources(account, course_dir) -> list:
    """Every assignment of the checkout not yet in the course's source/, copied there (an
    instructor's edits of one already there are kept); returns those copied."""
    uid = pwd.getpwnam(account).pw_uid
    gid = pwd.getpwnam(account).pw_gid
    copied = []
    for name in chosen_assignments("all"):
        target = course_dir / "source" / name
        if not target.exists():
            shutil.copytree(ASSIGNMENTS / name, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
            for path in [target.parent, target, *target.rglob("*")]:
                os.chown(path, uid, gid)
            copied.append(name)
    return copied


def add_assignments(account, course_dir, names) -> list:
    """Generate each of `names` not yet released in the course; returns the problems."""
    problems, new = [], [n for n in names if not (course_dir / "release" / n).is_dir()]
    for i, name in enumerate(new, 1):
        print(f"  [{i}/{len(new)}] generating {name} (its solution and release run in the sandbox) ...",
              flush=True)
        start = time.monotonic()
        done = as_account(account, ["generate", name], course_dir)
        took = time.monotonic() - start
        if done.returncode == 0:
            print(f"  [{i}/{len(new)}] {name} ready to release ({took:.0f} s)", flush=True)
        else:
            # not left looking ready: the next run generates it again
            shutil.rmtree(course_dir / "release" / name, ignore_errors=True)
            problems.append(f"{name}: {(done.stderr or done.stdout).strip()}")
            print(f"  [{i}/{len(new)}] {name} FAILED ({took:.0f} s): {(done.stderr or done.stdout).strip()}",
                  flush=True)
    return problems


def share_data(source, target: Path) -> list:
    """The data sets of `source` copied into `target` (files missing there only), folders
    0755 and files 0644 owned by root: every account reads them, none changes them for the
    others. Returns the data sets copied."""
    source = Path(source).expanduser()
    if not source.is_dir():
        raise SystemExit(f"--data {source}: no such folder (fetch the data first: "
                         "python -m needle_kernels.data.download mnist --dir FOLDER)")
    copied = []
    for entry in sorted(source.iterdir()):
        if entry.name.startswith("."):
            continue
        if not (target / entry.name).exists():
            copied.append(entry.name)
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, dirs_exist_ok=True, copy_function=shutil.copyfile)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(entry, target / entry.name)
    for path in [target, *target.rglob("*")]:
        os.chown(path, 0, 0)
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return copied


def close_secrets() -> list:
    closed = []
    for path in SECRETS:
        if path.exists() and path.stat().st_mode & 0o077:
            os.chmod(path, stat.S_IMODE(path.stat().st_mode) & 0o700)
            closed.append(str(path))
    return closed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--roster", default=str(HERE / "roster.csv"))
    parser.add_argument("--course", default="dlsys")
    parser.add_argument("--assignments", default="all",
                        help="which of course/assignments/ to add: all (default), none, or a comma list")
    parser.add_argument("--state", default=SYSTEM_STATE, help="the hub's own files (initial passwords)")
    parser.add_argument("--exchange", default=SYSTEM_EXCHANGE)
    parser.add_argument("--data", default=os.environ.get("NEEDLE_DATA_DIR") or None,
                        help="the data sets the lectures read, copied to STATE/data for every account "
                             "(default $NEEDLE_DATA_DIR)")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("creating system accounts needs root: sudo make hub-users")
    # useradd and chpasswd live in sbin, which `su` and some sudo set-ups leave off PATH
    os.environ["PATH"] = os.pathsep.join([os.environ.get("PATH", "/usr/bin:/bin"), "/usr/sbin", "/sbin"])
    for needed in [sys.executable, sysconfig.get_paths()["purelib"], REPO / "needle_kernels",
                   REPO / "course" / "coursekit", HERE / "singleuser.py"]:
        blocked = reachable_by_everyone(needed)
        if blocked:
            raise SystemExit(f"{blocked} keeps other accounts from reading {needed}; make the checkout's "
                             ".venv from a Python every account can run (e.g. `make setup "
                             "PYTHON=/usr/bin/python3`) in a folder every account can read (e.g. /opt/dlsys)")
    roles, rows = read_roster(opts.roster)
    state = Path(opts.state)
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o711)
    sheet = state / "initial-passwords.csv"
    created = [n for group in roles.values() for n in group if ensure_account(n, sheet)]
    grader_account = f"grader-{opts.course}"
    if ensure_account(grader_account):
        created.append(grader_account)
    print(f"accounts created: {', '.join(created) or 'none (all existed)'}")
    if any(n != grader_account for n in created):
        print(f"their initial passwords: {sheet} (root only; hand them out, then delete it)")

    exchange = Path(opts.exchange)
    exchange.mkdir(parents=True, exist_ok=True)
    os.chown(exchange, 0, 0)
    os.chmod(exchange, 0o1777)
    home = Path(pwd.getpwnam(grader_account).pw_dir)
    course_dir = home / opts.course
    made = ensure_course(grader_account, course_dir, opts.course, exchange)
    print(f"course folder: {course_dir} ({'made' if made else 'kept'}, owned by {grader_account}); "
          f"exchange: {exchange} (mode 1777)")
    print(f"gradebook: {add_students(grader_account, course_dir, rows)} student(s) of the roster, with their names")
    names = chosen_assignments(opts.assignments)
    copied = copy_sources(grader_account, course_dir)
    if copied:
        print(f"assignments added to the course's source/: {', '.join(copied)}")
    problems = add_assignments(grader_account, course_dir, names)
    release = course_dir / "release"
    ready = sorted(p.name for p in release.iterdir() if p.is_dir()) if release.is_dir() else []
    waiting = sorted(p.name for p in (course_dir / "source").iterdir() if p.is_dir() and p.name not in ready)
    print(f"assignments ready to release in the formgrader: {', '.join(ready) or 'none'}")
    if waiting:
        print(f"listed in the formgrader, to generate there (Generate) when due: {', '.join(waiting)}")
    if opts.data:
        shared = share_data(opts.data, state / "data")
        print(f"data for every account: {state / 'data'} ({', '.join(shared) or 'up to date'}; "
              "each server's NEEDLE_DATA_DIR)")
    else:
        print("no --data (nor NEEDLE_DATA_DIR): lectures will train on synthetic images; "
              "`make hub-users DATA=FOLDER` shares a folder holding mnist/ (and ptb/, cifar-10-batches-py/)")
    closed = close_secrets()
    if closed:
        print(f"closed to other accounts (source notebooks and history): {', '.join(closed)}")
    if problems:
        raise SystemExit("some assignments could not be generated:\n  " + "\n  ".join(problems))
    print("next: `sudo make hub`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
