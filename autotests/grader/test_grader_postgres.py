"""A course whose gradebook is a real PostgreSQL server: the command line flow from
`init --db-url postgresql://...` to `export`, graded in bubblewrap, with no sqlite file."""

import contextlib
import csv
import datetime
import glob
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from grader_testkit import FIXTURES, grader, grader_inprocess, require_bwrap, run_once
from simulated_class import ON_TIME, write_submission

pytestmark = pytest.mark.slow
COURSE_ID = "dlsys"
STUDENTS = ("correct", "partial", "blank")
GRADE_IDS = ("test_add", "test_mean_visible", "test_mean_hidden", "explain")


# -- a throwaway PostgreSQL server ---------------------------------------------------

def postgres_tools():
    """(initdb, pg_ctl) from PATH, else from the newest /usr/lib/postgresql/*/bin; None if absent."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return initdb, pg_ctl

    # Debian and Ubuntu keep the server tools off PATH, one folder per major version
    def major(folder):
        name = Path(folder).parent.name
        return int(name) if name.isdigit() else -1

    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True):
        initdb, pg_ctl = Path(folder, "initdb"), Path(folder, "pg_ctl")
        if os.access(initdb, os.X_OK) and os.access(pg_ctl, os.X_OK):
            return str(initdb), str(pg_ctl)
    return None


def server_user():
    """The account the server runs as: None for this one; initdb refuses root, so then an
    unprivileged account that exists."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.skip("running as root and there is neither a `postgres` nor a `nobody` account to run PostgreSQL")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server_folder(tmp_path_factory, user):
    """Where the server keeps its data, its socket and its log.

    Under pytest's temporary folder when the server runs as this user. Not when it runs
    as another: pytest keeps its folders 0700, and each pytest session that starts sets
    its root folder back to 0700, which would cut a running server (and `pg_ctl stop`)
    off from its data. Then a folder of its own in the system temp folder, removed after.
    """
    if user is None:
        yield tmp_path_factory.mktemp("postgres")
        return
    folder = Path(tempfile.mkdtemp(prefix="grader-postgres-"))
    try:
        closed = [p for p in folder.parents if not p.stat().st_mode & stat.S_IXOTH]
        if closed:
            pytest.fail(f"PostgreSQL runs as {user.pw_name}, which cannot enter {closed[0]}; "
                        "point TMPDIR at a folder every account can enter")
        os.chown(folder, user.pw_uid, user.pw_gid)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def stop_server(pg_ctl, data, run_as):
    """`pg_ctl stop -m immediate`; should that fail, the same signal straight to the postmaster."""
    run_as(pg_ctl, "stop", "-D", data, "-m", "immediate", "-w", check=False)
    pid_file = data / "postmaster.pid"
    if not pid_file.exists():
        return
    with contextlib.suppress(ValueError, OSError):  # OSError: it is gone
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGQUIT)  # what `-m immediate` sends
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.1)


@contextlib.contextmanager
def throwaway_postgres(tmp_path_factory):
    """A PostgreSQL server on 127.0.0.1 with its unix socket in its own folder; yields the
    URL of an empty `dlsys` database. It is stopped on the way out, whatever happened."""
    tools = postgres_tools()
    if tools is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl are neither on PATH nor in /usr/lib/postgresql/*/bin")
    psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL driver psycopg is not installed "
                                                    "(pip install 'psycopg[binary]', or the `test` extra)")
    initdb, pg_ctl = tools
    user = server_user()
    as_user = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    with server_folder(tmp_path_factory, user) as root:
        data, log = root / "data", root / "server.log"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(root)}

        def run_as(*args, check=True):
            # cwd: the server's account may not be allowed into the folder the tests run in
            proc = subprocess.run([*map(str, args)], cwd=root, env=env, capture_output=True, text=True,
                                  timeout=120, **as_user)
            if check and proc.returncode != 0:
                server_log = log.read_text() if log.exists() else ""
                raise AssertionError(f"{' '.join(map(str, args))} exited {proc.returncode}\n"
                                     f"{proc.stdout}\n{proc.stderr}\n{server_log}")
            return proc

        run_as(initdb, "-D", data, "-U", "grader", "--auth=trust", "--encoding=UTF8", "--no-locale",
               "--no-sync")
        port = free_port()
        # a throwaway server: durability is not under test, speed is wanted
        options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {shlex.quote(str(root))} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        try:
            run_as(pg_ctl, "start", "-D", data, "-l", log, "-w", "-t", "60", "-o", options)
            with contextlib.closing(psycopg.connect(host="127.0.0.1", port=port, user="grader",
                                                     dbname="postgres")) as conn:
                conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
                with conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE {COURSE_ID}")
            yield f"postgresql://grader@127.0.0.1:{port}/{COURSE_ID}"
        finally:
            stop_server(pg_ctl, data, run_as)


# -- the class -----------------------------------------------------------------------

def gradebook_scores(db_url, assignment):
    """{student: {grade_id: score}} plus '_raw' and '_penalty', read through nbgrader's Gradebook."""
    from nbgrader.api import Gradebook

    result = {}
    with Gradebook(db_url, COURSE_ID) as gb:
        for sub in gb.assignment_submissions(assignment):
            scores = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            scores["_raw"] = sub.score
            scores["_penalty"] = sub.late_submission_penalty or 0.0
            result[sub.student_id] = scores
    return result


def simulate_class(root, db_url):
    home, exchange, course, students = root / "home", root / "exchange", root / "course", root / "students"
    home.mkdir()
    out = {"db_url": db_url, "course": course, "root": root}

    def run(*args):
        return grader(args, course, home)

    out["init"] = grader(["init", course, "--course-id", COURSE_ID, "--exchange", exchange,
                          "--db-url", db_url], root, home)
    # short limits, as in the end-to-end test; every student submits as this same account,
    # so the exchange cannot tell them apart by owner
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("\nc.Execute.timeout = 5\nc.Sandbox.memory_mb = 1024\nc.Sandbox.notebook_budget = 120\n"
                 "c.LatePolicy.grace_minutes = 0\nc.ExchangeCollect.check_owner = False\n")
    (course / "source" / "ps1").mkdir(parents=True)
    shutil.copy(FIXTURES / "ps1" / "ps1.ipynb", course / "source" / "ps1" / "ps1.ipynb")
    roster = root / "roster.csv"
    roster.write_text("id,first_name,lms_user_id\n" + "".join(f"{n},{n.title()},lms-{i:03d}\n"
                                                               for i, n in enumerate(STUDENTS)))
    out["roster"] = run("roster", roster)
    tomorrow = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).isoformat()
    run("generate", "ps1", "--due", tomorrow)
    run("release", "ps1")
    for name in STUDENTS:
        folder = students / name
        folder.mkdir(parents=True)
        student = ["--course-id", COURSE_ID, "--exchange", exchange, "--student", name]
        grader_inprocess(["fetch", "ps1", *student], folder, folder)
        write_submission(ON_TIME[name][0], folder / "ps1" / "ps1.ipynb", {"read": [], "write": []})
        grader_inprocess(["submit", "ps1", *student], folder, folder)
    out["collect"] = run("collect", "ps1")
    out["autograde"] = run("autograde", "ps1", "-j", "2")
    out["scores"] = gradebook_scores(db_url, "ps1")
    out["autograde_again"] = run("autograde", "ps1", "-j", "2")
    out["scores_again"] = gradebook_scores(db_url, "ps1")
    run("export", "ps1", "--to", root / "grades.csv")
    with open(root / "grades.csv", newline="") as fh:
        out["csv"] = {row["student_id"]: row for row in csv.DictReader(fh)}
    out["sqlite_files"] = sorted(str(p.relative_to(course)) for p in course.rglob("*")
                                 if p.is_file() and p.read_bytes()[:16] == b"SQLite format 3\x00")
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_bwrap()

    def build():
        with throwaway_postgres(tmp_path_factory) as db_url:
            return simulate_class(tmp_path_factory.mktemp("postgres-class"), db_url)

    # once per session, shared by the pytest-xdist workers. The server lives only while
    # the class is simulated (so no worker's exit can leave it running, nor stop it under
    # another); the tests below check what was read from it then.
    return run_once(tmp_path_factory, "grader-postgres", build)


def test_the_course_uses_the_postgres_gradebook(graded):
    assert f"gradebook {graded['db_url']}" in graded["init"].stdout
    config = (graded["course"] / "nbgrader_config.py").read_text()
    assert f"c.CourseDirectory.db_url = {graded['db_url']!r}" in config
    assert "3 student(s)" in graded["roster"].stdout


def test_no_sqlite_gradebook_was_created(graded):
    assert not (graded["course"] / "gradebook.db").exists()
    assert graded["sqlite_files"] == []


def test_exact_autograded_scores_in_postgres(graded):
    scores = graded["scores"]
    assert set(scores) == set(STUDENTS)
    for name in STUDENTS:
        assert scores[name]["_raw"] == ON_TIME[name][1], name
        assert scores[name]["_penalty"] == 0, name
        assert scores[name].get("explain", 0) == 0, name  # the manual question waits for a person
    assert (scores["partial"]["test_add"], scores["partial"]["test_mean_visible"],
            scores["partial"]["test_mean_hidden"]) == (2, 1, 0)
    assert "autograded 3 submission(s) of ps1" in graded["autograde"].stdout


def test_a_second_autograde_changes_nothing(graded):
    assert graded["scores_again"] == graded["scores"]
    assert "0 new execution(s)" in graded["autograde_again"].stdout


def test_export_matches_the_postgres_gradebook(graded):
    rows, scores = graded["csv"], graded["scores"]
    assert set(rows) == set(STUDENTS)
    for name, row in rows.items():
        assert row["lms_user_id"] == f"lms-{STUDENTS.index(name):03d}"
        assert float(row["raw_score"]) == scores[name]["_raw"]
        assert float(row["late_penalty"]) == scores[name]["_penalty"]
        assert float(row["score"]) == max(scores[name]["_raw"] - scores[name]["_penalty"], 0)
        for grade_id in GRADE_IDS:
            assert float(row[f"ps1:{grade_id}"]) == scores[name][grade_id]


def test_init_against_a_server_out_of_reach_fails_in_one_line_and_can_be_retried(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    closed = f"postgresql://grader@127.0.0.1:{free_port()}/{COURSE_ID}"  # nothing listens
    args = ["init", tmp_path / "c", "--course-id", COURSE_ID, "--exchange", tmp_path / "x", "--db-url", closed]
    for _ in range(2):  # the second attempt is not refused as "already exists"
        proc = grader(args, tmp_path, home, check=False)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith(f"grader init: error: cannot open the gradebook {closed}: ")
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # no traceback
        assert not (tmp_path / "c" / "nbgrader_config.py").exists()
