"""`make hub`: serve the course to a class with JupyterHub and nbgrader's multi-user layout.

    python hub/launch.py [--roster hub/roster.csv] [--course dlsys] [--port 8000]
                         [--mode auto|system|single] [--state DIR] [--exchange DIR]
                         [--cull-idle SECONDS] [--threads-per-user N] [--prepare-only]

Two modes, chosen by `auto`:
- system: every roster member and the course's grader account (`grader-COURSE`) is a
  real system account (`make hub-users`, as root, creates them), the hub runs as root
  and `LocalProcessSpawner` starts each server as its owner. The exchange is
  /srv/nbgrader/exchange and the course lives in the grader account's home.
- single: no accounts can be had (not root, or none created). Every server runs as the
  account running the hub, so students are NOT isolated from each other or from the
  course: for trying the course out, not for a class that is graded. Each user still
  logs in with a password of their own (written once to STATE/initial-passwords.csv),
  and nbgrader files submissions under the hub login (`JUPYTERHUB_USER`), not under
  the one system account.

Every server's kernels run their parallel work on `--threads-per-user` threads (its
OMP_NUM_THREADS, which needle_kernels, numpy's OpenBLAS and PyTorch read; default a
quarter of the machine's cores, at least one). A class's server has several students
running cells at once, and kernels that each start a thread per core then take the cores
from each other: benchmarks/bench_wait_policy.py prints two processes at once, each on
every core and each on one thread.

Every server's NEEDLE_DATA_DIR is STATE/data, the copy of the data sets `make hub-users`
makes readable by every account, or else the hub's own NEEDLE_DATA_DIR.

Every start (and `--prepare-only`) publishes course/lectures as a git repository in the
state folder, which each user's server pulls into ~/COURSE/lectures when it starts
(`hub/singleuser.py`, nbgitpuller), and turns JupyterLab's news and update checks off in
this environment (the machine is offline).

The layout is nbgrader's documented one: the formgrader runs as a hub service named
after the course, as the grader account; `formgrade-COURSE` (instructor, TA) may use
it, `nbgrader-COURSE` (students) sees the course's assignments; the exchange path
includes the course id and nbgrader asks the hub which courses a user takes
(`JupyterHubAuthPlugin`).
"""

import argparse
import csv
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from roster_auth import write_passwords  # noqa: E402

SYSTEM_EXCHANGE = "/srv/nbgrader/exchange"
SYSTEM_STATE = "/srv/nbgrader/hub"
LECTURES = REPO / "course" / "lectures"
# JupyterLab's defaults for every user of this environment: no news feed, no update
# check and no extension catalogue, all of which ask the internet
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension:plugin": {"enabled": False},
}
DEFAULT_STATE = os.path.expanduser("~/.local/state/needle_kernels-hub")


def read_roster(path):
    """{"instructor": [...], "ta": [...], "student": [...]} and the rows, from a roster CSV."""
    with open(path, newline="") as fh:
        rows = [{k.strip(): (v or "").strip() for k, v in row.items()} for row in csv.DictReader(fh)]
    roles = {"instructor": [], "ta": [], "student": []}
    for row in rows:
        if row.get("role") not in roles:
            raise SystemExit(f"{path}: role of {row.get('username')!r} must be instructor, ta or student")
        roles[row["role"]].append(row["username"])
    if not roles["instructor"]:
        raise SystemExit(f"{path}: the roster names no instructor")
    return roles, rows


def account_exists(name) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def choose_mode(requested, roles, grader_account) -> tuple:
    names = [grader_account] + [n for group in roles.values() for n in group]
    missing = [n for n in names if not account_exists(n)]
    if requested == "system" or (requested == "auto" and os.geteuid() == 0 and not missing):
        if os.geteuid() != 0:
            raise SystemExit("system mode starts each server as its user, which needs root")
        if missing:
            raise SystemExit(f"no system account for {', '.join(missing)}: run `make hub-users` (as root)")
        return "system", "every user is a system account; servers run as their owners"
    why = "not root" if os.geteuid() != 0 else f"no system accounts for {', '.join(missing[:3])}" + \
        ("..." if len(missing) > 3 else "") + " (`make hub-users` creates them)"
    return "single", (f"SINGLE-ACCOUNT MODE ({why}): every server runs as {pwd.getpwuid(os.geteuid()).pw_name}, "
                      "so students are not isolated from each other or the course; not for a graded class")


def grader_cmd(args, cwd, env=None):
    subprocess.run([sys.executable, "-m", "grader", *map(str, args)], cwd=str(cwd), check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, stdout=subprocess.DEVNULL)


def git(*args, cwd=None):
    return subprocess.run(["git", "-c", "user.name=hub", "-c", "user.email=hub@localhost", *map(str, args)],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def publish_lectures(state: Path) -> Path:
    """course/lectures committed, when changed, to the bare repository STATE/lectures.git.

    Students never see the checkout's history (which holds the source notebooks): the
    repository holds nothing but the lectures, committed as they are on disk."""
    repo = state / "lectures.git"
    if not (repo / "HEAD").exists():
        git("init", "-q", "--bare", "-b", "main", repo)
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "exclude").write_text(".ipynb_checkpoints/\n__pycache__/\n")
    tree = ["--git-dir", repo, "--work-tree", LECTURES]
    git(*tree, "add", "-A", ".")
    if git(*tree, "status", "--porcelain"):
        git(*tree, "commit", "-q", "-m", "lectures as published by the hub")
    for path in [repo, *repo.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    # git reads another account's repository only where a global setting names it
    gitconfig = state / "gitconfig"
    gitconfig.write_text(f"[safe]\n\tdirectory = {repo}\n")
    os.chmod(gitconfig, 0o644)
    return repo


def lab_overrides():
    """LAB_OVERRIDES in this environment's JupyterLab settings, kept with any others there."""
    folder = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"
    path = folder / "overrides.json"
    try:
        current = json.loads(path.read_text()) if path.exists() else {}
        merged = {**current, **{k: {**current.get(k, {}), **v} for k, v in LAB_OVERRIDES.items()}}
        if merged != current:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(merged, indent=1))
            os.chmod(path, 0o644)
    except OSError as err:
        print(f"hub: cannot write {path} ({err}): JupyterLab will ask about news and updates")


def private_file(path: Path, text=None):
    """`path` readable by this account only (created empty where missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if text is not None else 0), 0o600)
    with os.fdopen(fd, "w") as fh:
        if text is not None:
            fh.write(text)
    os.chmod(path, 0o600)


def prepare(opts) -> dict:
    roles, rows = read_roster(opts.roster)
    grader_account = f"grader-{opts.course}"
    mode, note = choose_mode(opts.mode, roles, grader_account)
    # every user's server reads the hub's nbgrader settings from the state folder, so with
    # real accounts it cannot sit in root's home
    state = Path(opts.state or (SYSTEM_STATE if mode == "system" else DEFAULT_STATE)).resolve()
    if mode == "system":
        closed = [str(f) for f in [*reversed(state.parents)] if f.exists() and not f.stat().st_mode & 0o001]
        if closed:
            raise SystemExit(f"{closed[0]} keeps the users' servers from reading {state}; "
                             f"choose another --state (default {SYSTEM_STATE})")
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o711 if mode == "system" else 0o700)
    if mode == "system":
        exchange = Path(opts.exchange or SYSTEM_EXCHANGE)
        course_dir = Path(pwd.getpwnam(grader_account).pw_dir) / opts.course
        if not (course_dir / "nbgrader_config.py").exists():
            raise SystemExit(f"{course_dir} has no course: run `make hub-users` (as root)")
    else:
        exchange = Path(opts.exchange) if opts.exchange else state / "exchange"
        course_dir = state / "courses" / opts.course
        if not (course_dir / "nbgrader_config.py").exists():
            grader_cmd(["init", course_dir, "--course-id", opts.course, "--exchange", exchange], state)
            with open(course_dir / "nbgrader_config.py", "a") as fh:
                # every file here belongs to the one account, so owners prove nothing
                fh.write("\n# single-account hub: submissions cannot be told apart by their owner\n"
                         "c.ExchangeCollect.check_owner = False\n")
        exchange.mkdir(parents=True, exist_ok=True)
        os.chmod(exchange, 0o777)
    students = [r for r in rows if r["role"] == "student"]
    listing = state / "gradebook-roster.csv"
    with open(listing, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "first_name", "last_name", "email"])
        for r in students:
            out.writerow([r["username"], r.get("first_name", ""), r.get("last_name", ""), r.get("email", "")])
    if mode == "single":
        grader_cmd(["roster", listing], course_dir)

    # the nbgrader settings every server shares (students', TAs' and the course service's)
    config_dir = state / "jupyter-config"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "nbgrader_config.py").write_text(NBGRADER_GLOBAL.format(
        exchange=str(exchange), single=mode == "single"))
    os.chmod(config_dir, 0o755)
    os.chmod(config_dir / "nbgrader_config.py", 0o644)
    # what each kind of server shows (nbgrader's advice for a hub): students and TAs get no
    # formgrader and no assignment editor in their own servers, and nobody gets the
    # formgrader panel inside JupyterLab, whose iframe JupyterHub's frame-ancestors
    # policy leaves blank (the course service opens the formgrader as its own page)
    kinds = {
        "users": ({"@jupyter/nbgrader:formgrader": True, "@jupyter/nbgrader:create-assignment": True},
                  {"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": False}}}),
        "service": ({"@jupyter/nbgrader:formgrader": True}, None),
    }
    for kind, (disabled, server) in kinds.items():
        folder = state / f"jupyter-config-{kind}"
        (folder / "labconfig").mkdir(parents=True, exist_ok=True)
        (folder / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
        if server:
            (folder / "jupyter_server_config.json").write_text(json.dumps(server))
        for path in [folder, folder / "labconfig", *folder.rglob("*.json")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)

    token_file = state / "service-token"
    if not token_file.exists():
        private_file(token_file, secrets.token_hex(32))
    culler_token = state / "culler-token"
    if not culler_token.exists():
        private_file(culler_token, secrets.token_hex(32))
    # the hub's database holds every user's tokens: made private before the hub opens it
    private_file(state / "jupyterhub.sqlite")
    lectures = publish_lectures(state)
    lab_overrides()
    # the data the lectures read: the copy `make hub-users --data` shares with every
    # account, else the hub's own NEEDLE_DATA_DIR (single-account mode reads it as is)
    data = state / "data"
    data_dir = str(data) if data.is_dir() else os.environ.get("NEEDLE_DATA_DIR", "")
    settings = {
        "mode": mode, "note": note, "course": opts.course, "course_dir": str(course_dir),
        "exchange": str(exchange), "state": str(state), "ip": opts.ip, "port": opts.port,
        "hub_port": opts.port + 1, "proxy_api_port": opts.port + 2, "service_port": opts.port + 3,
        "instructors": roles["instructor"], "tas": roles["ta"], "students": roles["student"],
        "grader_account": grader_account, "service_token": token_file.read_text().strip(),
        "bin": str(Path(sys.executable).parent), "python": sys.executable, "config_dir": str(config_dir),
        "repo": str(REPO), "lectures_repo": str(lectures), "gitconfig": str(state / "gitconfig"),
        "culler_token": culler_token.read_text().strip(), "cull_idle": opts.cull_idle,
        "data_dir": data_dir, "threads_per_user": opts.threads_per_user or max(1, (os.cpu_count() or 1) // 4),
    }
    if mode == "single":
        users = roles["instructor"] + roles["ta"] + roles["student"]
        new = write_passwords(state / "passwords.json", users)
        if new:
            sheet = state / "initial-passwords.csv"
            fd = os.open(sheet, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.writelines(f"{user},{password}\n" for user, password in new.items())
            print(f"passwords of {len(new)} new user(s) written to {sheet} (hand them out, then delete it)")
        settings["password_file"] = str(state / "passwords.json")
    private_file(state / "hub-settings.json", json.dumps(settings, indent=1))
    return settings


NBGRADER_GLOBAL = '''\
# nbgrader on the hub: read by every server (students', TAs', the course service's).
import os

from nbgrader.auth import JupyterHubAuthPlugin

c = get_config()  # noqa: F821
c.Exchange.root = {exchange!r}
# one exchange for several courses: each course has its own folder in it
c.Exchange.path_includes_course = True
# the courses a user takes are the hub groups they are in (nbgrader-COURSE, formgrade-COURSE)
c.Authenticator.plugin_class = JupyterHubAuthPlugin
if {single!r} and os.environ.get("JUPYTERHUB_USER") and not os.environ.get("JUPYTERHUB_SERVICE_NAME"):
    # one system account for everybody: nbgrader would file every submission under its
    # name (it only trusts JUPYTERHUB_USER for the account `jovyan`), so the hub login is
    # the student id
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
'''


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--roster", default=str(HERE / "roster.csv"))
    parser.add_argument("--course", default="dlsys")
    parser.add_argument("--ip", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--mode", choices=["auto", "system", "single"], default="auto")
    parser.add_argument("--state", default=None,
                        help=f"the hub's own files (default {SYSTEM_STATE} with system accounts, "
                             f"else {DEFAULT_STATE})")
    parser.add_argument("--exchange", default=None,
                        help=f"nbgrader's exchange (default {SYSTEM_EXCHANGE} with system accounts, "
                             "else STATE/exchange)")
    parser.add_argument("--cull-idle", type=int, default=3600,
                        help="stop a user's server after this many seconds without activity (0: never)")
    parser.add_argument("--threads-per-user", type=int, default=0,
                        help="the threads each user's kernels compute on (OMP_NUM_THREADS; "
                             "0, the default: a quarter of the cores, at least 1)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="write the settings and publish the lectures, without starting the hub")
    opts = parser.parse_args(argv)
    if opts.threads_per_user < 0:
        parser.error(f"--threads-per-user: {opts.threads_per_user} is not a number of threads (0: the default)")
    settings = prepare(opts)
    print(f"hub: {settings['note']}")
    print(f"hub: http://{opts.ip}:{opts.port}/hub/login (course {opts.course}; formgrader: "
          f"http://{opts.ip}:{opts.port}/services/{opts.course}/formgrader)")
    if opts.prepare_only:
        return 0
    hub = shutil.which("jupyterhub", path=settings["bin"]) or "jupyterhub"
    os.chdir(settings["state"])
    env = {**os.environ, "NK_HUB_SETTINGS": str(Path(settings["state"]) / "hub-settings.json")}
    os.execve(hub, [hub, "-f", str(HERE / "jupyterhub_config.py")], env)


if __name__ == "__main__":
    sys.exit(main())
