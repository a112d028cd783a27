"""The comment bank: comments from the course config added to an answer's comment in
nbgrader's gradebook, where the formgrader's comment box reads it."""

import datetime
import os
import sys

import pytest

from grader_testkit import REPO, grader_inprocess

sys.path.insert(0, str(REPO))

BANK = {"units": "Say which units each quantity is in.", "shapes": "Check the shapes before multiplying."}
DUE = datetime.datetime(2026, 3, 1, 12, 0)


@pytest.fixture
def course(tmp_path, monkeypatch):
    from grader.cli import _tools_on_path
    from grader.course import init_course, load_course
    from grader.term import grant_extension, parse_duration

    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    _tools_on_path()  # nbgrader's gradebook runs `alembic`
    monkeypatch.setenv("HOME", str(tmp_path))
    made = init_course(tmp_path / "c", "c1", exchange=tmp_path / "x")
    with open(made.root / "nbgrader_config.py", "a") as fh:
        fh.write(f"\nc.CommentBank.comments = {BANK!r}\n")
    made = load_course(made.root)
    with made.gradebook() as gb:
        gb.update_or_create_assignment("ps1", duedate=DUE)
        for notebook in ("ps1", "extra"):
            gb.add_notebook(notebook, "ps1")
            gb.add_solution_cell("explain", notebook, "ps1")
            gb.add_grade_cell("explain", notebook, "ps1", max_score=2.0, cell_type="markdown")
        gb.add_solution_cell("derive", "ps1", "ps1")
        gb.add_grade_cell("derive", "ps1", "ps1", max_score=2.0, cell_type="markdown")
        for student in ("ada", "bob"):
            gb.update_or_create_student(student)
        gb.update_or_create_submission("ps1", "ada", timestamp=DUE - datetime.timedelta(hours=1))
    grant_extension(made, "ps1", "cyd", parse_duration("1d"))  # a row, but nothing submitted
    return made


def run(course, *args):
    return grader_inprocess(list(args), course.root, os.environ["HOME"], check=False)


def comment_as_the_formgrader_reads_it(course, notebook, cell, student="ada"):
    """What the formgrader's comment API answers for that answer (`Comment.to_dict`)."""
    with course.gradebook() as gb:
        submitted = gb.find_submission_notebook(notebook, "ps1", student)
        (comment,) = [c.to_dict() for c in submitted.comments if c.name == cell]
        return comment["manual_comment"]


def test_bank_comments_go_into_the_answers_comment(course):
    listed = run(course, "comments").stdout
    assert f"  units: {BANK['units']}" in listed and "2 comment(s) in the bank" in listed

    with course.gradebook() as gb:  # what a grader typed in the formgrader first stays
        comment = gb.find_comment("derive", "ps1", "ps1", "ada")
        comment.manual_comment = "Good start."
        gb.db.commit()
    done = run(course, "comment", "ps1", "ada", "derive", "units")
    assert done.returncode == 0, done.stderr
    assert comment_as_the_formgrader_reads_it(course, "ps1", "derive") == f"Good start.\n\n{BANK['units']}"
    run(course, "comment", "ps1", "ada", "derive", "units", "shapes")  # units is not added twice
    assert comment_as_the_formgrader_reads_it(course, "ps1", "derive") == \
        f"Good start.\n\n{BANK['units']}\n\n{BANK['shapes']}"

    ambiguous = run(course, "comment", "ps1", "ada", "explain", "shapes")
    assert ambiguous.returncode == 1 and "--notebook" in ambiguous.stderr and "extra, ps1" in ambiguous.stderr
    assert run(course, "comment", "ps1", "ada", "explain", "shapes", "--notebook", "extra").returncode == 0
    assert comment_as_the_formgrader_reads_it(course, "extra", "explain") == BANK["shapes"]
    assert comment_as_the_formgrader_reads_it(course, "ps1", "explain") is None

    assert run(course, "comment", "ps1", "ada", "derive", "--clear").returncode == 0
    assert comment_as_the_formgrader_reads_it(course, "ps1", "derive") == ""


@pytest.mark.parametrize("args, says", [
    (("ps1", "ada", "derive", "unit"), "not in the comment bank: unit; it has shapes, units"),
    (("ps1", "ada", "derive"), "name at least one comment"),
    (("ps1", "ada", "proof", "units"), "no answer 'proof'; answers with a comment: extra:explain, ps1:derive, "
                                       "ps1:explain"),
    (("ps1", "bob", "derive", "units"), "bob has no submission of ps1"),
    (("ps1", "cyd", "derive", "units"), "cyd's submission of ps1 is not autograded yet"),
    (("ps9", "ada", "derive", "units"), "ada has no submission of ps9"),
    (("ps1", "ada", "derive", "units", "--clear"), "--clear empties the comment; name no comment"),
])
def test_bad_requests_say_what_is_wrong(course, args, says):
    done = run(course, "comment", *args)
    assert done.returncode == 1 and says in done.stderr, done.stderr


def test_an_empty_bank_says_where_to_write_it(course):
    config = course.root / "nbgrader_config.py"
    config.write_text(config.read_text().replace(f"c.CommentBank.comments = {BANK!r}", ""))
    done = run(course, "comment", "ps1", "ada", "derive", "units")
    assert done.returncode == 1 and "c.CommentBank.comments" in done.stderr
