"""Late policy, forged timestamps, hidden tests in feedback, CLI error handling."""

import datetime
import os
import sys

import nbformat
import pytest
from traitlets.config import Config

from grader_testkit import FIXTURES, REPO, grader

sys.path.insert(0, str(REPO))
from grader.feedback import HideHiddenTests  # noqa: E402
from grader.late import GraceLatePenalty, judge_timestamp  # noqa: E402

UTC = datetime.timezone.utc
DUE = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_honest_timestamp_is_kept():
    trusted, note = judge_timestamp("2026-03-01 11:59:00.000000 UTC", DUE - datetime.timedelta(minutes=1),
                                    DUE - datetime.timedelta(seconds=59), 120)
    assert note is None and trusted == DUE - datetime.timedelta(minutes=1)


def test_backdated_timestamp_is_flagged_and_arrival_used():
    arrived = DUE + datetime.timedelta(hours=2)
    trusted, note = judge_timestamp("2026-03-01 11:00:00.000000 UTC", arrived, arrived, 120)
    assert trusted == arrived and note.startswith("FORGED TIMESTAMP")


def test_timestamp_disagreeing_with_the_exchange_name_is_flagged():
    named = DUE + datetime.timedelta(hours=1)
    trusted, note = judge_timestamp("2026-03-01 11:00:00.000000 UTC", named, named, 120)
    assert "differs from the submission's own record" in note


@pytest.mark.parametrize("grace, late, penalty", [(10, 5 * 60, None), (10, 11 * 60, 4.0), (0, 1, 4.0)])
def test_grace_period(grace, late, penalty):
    plugin = GraceLatePenalty(config=Config({"LatePolicy": {"grace_minutes": grace}}))
    assert plugin.late_submission_penalty("s", 4.0, late) == penalty


def test_hidden_tests_are_withheld_but_their_result_shown():
    cell = nbformat.v4.new_code_cell("assert f(1) == 1\n### BEGIN HIDDEN TESTS\nassert f(2) == 'secret'\n"
                                     "### END HIDDEN TESTS")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="assert f(2) == 'secret'\n"),
                    nbformat.v4.new_output("error", ename="AssertionError", evalue="f(2) == 'secret'",
                                           traceback=["----> 3 assert f(2) == 'secret'"])]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    text = nbformat.writes(nb)
    assert "secret" not in text and "assert f(1) == 1" in text and "AssertionError" in text
    revealed, _ = HideHiddenTests(config=Config({"FeedbackPolicy": {"reveal_hidden_tests": True}})) \
        .preprocess(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            "### BEGIN HIDDEN TESTS\nx\n### END HIDDEN TESTS")]), {})
    assert "BEGIN HIDDEN TESTS" in revealed.cells[0].source


def test_commands_fail_clearly(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = grader(["autograde", "ps1"], tmp_path, home, check=False)
    assert proc.returncode == 1 and "is not a course directory" in proc.stderr
    grader(["init", tmp_path / "c", "--course-id", "c1", "--exchange", tmp_path / "x"], tmp_path, home)
    proc = grader(["autograde", "nope"], tmp_path / "c", home, check=False)
    assert proc.returncode == 1 and "'nope' is not in the gradebook" in proc.stderr
    proc = grader(["init", tmp_path / "c", "--course-id", "c1"], tmp_path, home, check=False)
    assert proc.returncode == 1 and "already exists" in proc.stderr
    proc = grader(["fetch", "ps9", "--course-id", "c1", "--exchange", tmp_path / "x"], tmp_path, home,
                  check=False)
    assert proc.returncode == 1 and "fetch" in proc.stderr.lower()
    proc = grader(["roster", tmp_path / "no-such-roster.csv"], tmp_path / "c", home, check=False)
    assert proc.returncode == 1 and "no-such-roster.csv" in proc.stderr and "Traceback" not in proc.stderr


def test_doctor_reports_the_sandbox(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    grader(["init", tmp_path / "c", "--course-id", "c1", "--exchange", tmp_path / "x"], tmp_path, home)
    proc = grader(["doctor"], tmp_path / "c", home, check=False)
    assert "sandbox bwrap" in proc.stdout and "exchange" in proc.stdout and "kernel" in proc.stdout
    assert proc.returncode == (0 if "ready to grade" in proc.stdout else 1)


def test_auto_falls_back_to_unshare_and_none_only_when_asked(monkeypatch):
    from grader.sandbox import confinement

    answers = {"bwrap": (False, "bwrap is not installed"), "unshare": (True, "unshare works")}
    monkeypatch.setattr(confinement, "_cached_probe", lambda mode: answers[mode])
    mode, warnings = confinement.choose("auto")
    assert mode == "unshare" and "falling back to unshare" in warnings[0] and "bwrap is not installed" in warnings[0]

    answers["unshare"] = (False, "unshare cannot create namespaces here")
    with pytest.raises(RuntimeError, match="no sandbox available.*set c.Sandbox.mode = 'none'"):
        confinement.choose("auto")  # never silently unconfined

    mode, warnings = confinement.choose("none")
    assert mode == "none" and "UNCONFINED" in warnings[0]


def test_solutions_wait_for_the_late_window(tmp_path, monkeypatch):
    """Past the due date but inside c.SolutionRelease.late_window_hours, release is refused."""
    from grader import GraderError
    from grader.cli import _tools_on_path
    from grader.course import init_course, load_course
    from grader.solutions import release_time, solutions

    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # restored after the test
    _tools_on_path()  # nbgrader's gradebook runs `alembic`
    monkeypatch.setenv("HOME", str(tmp_path))
    course = init_course(tmp_path / "c", "c1", exchange=tmp_path / "x")
    config = course.root / "nbgrader_config.py"
    config.write_text(config.read_text() + "\nc.SolutionRelease.late_window_hours = 48\n")
    course = load_course(course.root)
    due = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(hours=1)
    with course.gradebook() as gb:
        gb.update_or_create_assignment("ps1", duedate=due)
    opens = release_time(course, "ps1")
    assert opens.replace(tzinfo=None) == due + datetime.timedelta(hours=48)
    with pytest.raises(GraderError, match="can be released from .*use --force"):
        solutions(course, "ps1")


def test_solutions_force_releases_before_the_due_date(tmp_path):
    """`grader solutions --force` is the instructor's override; students then fetch them."""
    home, course, exchange, student = (tmp_path / n for n in ("home", "c", "x", "ada"))
    home.mkdir()
    student.mkdir()
    grader(["init", course, "--course-id", "c1", "--exchange", exchange], tmp_path, home)
    (course / "source" / "ps1").mkdir(parents=True)
    (course / "source" / "ps1" / "ps1.ipynb").write_text((FIXTURES / "ps1" / "ps1.ipynb").read_text())
    due = (datetime.datetime.now(UTC) + datetime.timedelta(days=7)).isoformat()
    grader(["generate", "ps1", "--due", due], course, home)
    as_student = ["--course-id", "c1", "--exchange", exchange, "--student", "ada"]

    refused = grader(["solutions", "ps1"], course, home, check=False)
    assert refused.returncode != 0 and "use --force" in refused.stderr
    early = grader(["fetch-solutions", "ps1", *as_student], student, home, check=False)
    assert early.returncode != 0 and "not released" in early.stderr

    forced = grader(["solutions", "ps1", "--force"], course, home)
    assert "released as ps1-solution" in forced.stdout
    grader(["fetch-solutions", "ps1", *as_student], student, home)
    fetched = (student / "ps1-solution" / "ps1.ipynb").read_text()
    assert "SECRET_HIDDEN_CHECK" not in fetched and "BEGIN HIDDEN TESTS" not in fetched
    assert "return sum(xs) / len(xs)" in fetched  # the solution code itself


def test_the_gradebook_url_is_honoured(tmp_path):
    """`grader init --db-url` puts the gradebook where the URL says, and commands use it there."""
    home = tmp_path / "home"
    home.mkdir()
    elsewhere = tmp_path / "db" / "grades.sqlite"
    elsewhere.parent.mkdir()
    grader(["init", tmp_path / "c", "--course-id", "c1", "--exchange", tmp_path / "x",
            "--db-url", f"sqlite:///{elsewhere}"], tmp_path, home)
    assert elsewhere.is_file() and not (tmp_path / "c" / "gradebook.db").exists()
    (tmp_path / "roster.csv").write_text("id,first_name,last_name,email,lms_user_id\nada,Ada,L,a@x.org,77\n")
    proc = grader(["roster", tmp_path / "roster.csv"], tmp_path / "c", home)
    assert "1 student(s)" in proc.stdout

    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{elsewhere}", "c1") as gb:
        assert gb.find_student("ada").lms_user_id == "77"


@pytest.mark.parametrize("url, shown", [
    ("postgresql://grader:s3cret@db.example.org:5432/dlsys", "postgresql://grader:***@db.example.org:5432/dlsys"),
    ("sqlite:////srv/course/gradebook.db", "sqlite:////srv/course/gradebook.db"),
])
def test_gradebook_passwords_are_not_printed(url, shown):
    from grader.course import shown_url
    assert shown_url(url) == shown


def test_sandbox_run_takes_plain_settings():
    """The sandbox's runner imports nothing of nbgrader or the course config: a course config
    becomes `RunSettings` in `grader.sandbox.execute`, and the dependency goes one way."""
    import subprocess

    code = ("import sys, grader.sandbox.run\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'nbgrader' or m in "
            "('grader.sandbox.execute', 'grader.settings')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.strip() == "[]"


def test_state_lives_under_one_folder(tmp_path):
    from grader import notes
    from grader.state import STATE_DIR, CourseState, ExecutionCache, write_atomic

    notes.record(tmp_path, "ps1", "ada", "checks", ["a note"])
    state = CourseState(tmp_path)
    assert state.notes_file("ps1", "ada").exists()
    assert ExecutionCache(tmp_path).dir == state.executions == tmp_path / STATE_DIR / "executions"
    write_atomic(tmp_path / "f.txt", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_DIR, "f.txt"]  # no partial file left


def test_doctor_tells_a_grader_fault_from_a_machine_without_namespaces(monkeypatch):
    """Working bubblewrap that the grader cannot start is an error, never a reason to skip."""
    from grader import doctor
    from grader.sandbox import confinement

    monkeypatch.setattr(confinement, "probe", lambda mode: (False, "setpriv: failed to execute python"))
    monkeypatch.setattr(confinement, "machine_allows", lambda mode: (True, f"{mode} can create namespaces"))
    assert confinement.diagnose("bwrap")[0] == "grader-fault"
    found = {topic: (ok, detail) for ok, topic, detail in doctor.checks()}
    assert found["sandbox bwrap"][0] is False and "does not start" in found["sandbox bwrap"][1]

    monkeypatch.setattr(confinement, "machine_allows", lambda mode: (False, "no user namespaces"))
    assert confinement.diagnose("bwrap") == ("machine-forbids", "no user namespaces")
    found = {topic: (ok, detail) for ok, topic, detail in doctor.checks()}
    assert found["sandbox bwrap"] == (None, "no user namespaces")  # auto mode: information only
