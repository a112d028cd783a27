"""A comment bank for grading by hand: comments written once in `nbgrader_config.py`,

    c.CommentBank.comments = {"units": "Say which units each quantity is in.",
                              "shapes": "Check the shapes before multiplying."}

and added by name to a student's answer (a solution cell, each of which has a comment
box in the formgrader):

    grader comments                                   the bank
    grader comment ps1 ada explain units shapes       add both to ada's answer `explain`
    grader comment ps1 ada explain --clear            empty that comment

The text goes to nbgrader's own `Comment.manual_comment` in the gradebook, which is what
the formgrader's comment box reads and writes, and what generated feedback shows; a
comment already there is kept, and one of the bank's already in it is not added twice.
"""

from grader import GraderError
from grader.settings import CommentBank

SEPARATOR = "\n\n"


def bank(course) -> dict:
    return dict(course.section(CommentBank).comments)


def _comment(course, gb, assignment, student, cell, notebook=None):
    """The gradebook's Comment of `student`'s answer `cell` (in `notebook`, when given)."""
    from nbgrader.api import MissingEntry

    try:
        submission = gb.find_submission(assignment, student)
    except MissingEntry:
        raise GraderError(f"{student} has no submission of {assignment} in the gradebook") from None
    # an extension granted before submitting is a row without a timestamp: nothing to comment on
    if submission.timestamp is None and not course.path("autograded", student, assignment).is_dir():
        raise GraderError(f"{student}'s submission of {assignment} is not autograded yet")
    comments = [c for nb in submission.notebooks for c in nb.comments
                if c.name == cell and notebook in (None, nb.name)]
    if len(comments) == 1:
        return comments[0]
    if not comments:
        cells = sorted(f"{nb.name}:{c.name}" for nb in submission.notebooks for c in nb.comments)
        raise GraderError(f"{assignment} has no answer {cell!r}"
                          + (f" in notebook {notebook!r}" if notebook else "")
                          + f"; answers with a comment: {', '.join(cells) or 'none'}")
    raise GraderError(f"{cell!r} is an answer in several notebooks of {assignment} "
                      f"({', '.join(sorted(c.notebook.name for c in comments))}); name one with --notebook")


def add_comments(course, assignment, student, cell, names, notebook=None) -> str:
    """Add the bank's comments `names` to the answer's comment; returns the comment now."""
    known = bank(course)
    if not known:
        raise GraderError("the comment bank is empty: set c.CommentBank.comments = {'name': 'text', ...} "
                          "in nbgrader_config.py")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise GraderError(f"not in the comment bank: {', '.join(unknown)}; it has {', '.join(sorted(known))}")
    if not names:
        raise GraderError("name at least one comment of the bank (`grader comments` lists them)")
    with course.gradebook() as gb:
        comment = _comment(course, gb, assignment, student, cell, notebook)
        text = (comment.manual_comment or "").strip()
        for name in names:
            if known[name].strip() not in text:
                text = (text + SEPARATOR if text else "") + known[name].strip()
        comment.manual_comment = text
        gb.db.commit()
        return text


def clear_comment(course, assignment, student, cell, notebook=None) -> None:
    with course.gradebook() as gb:
        comment = _comment(course, gb, assignment, student, cell, notebook)
        comment.manual_comment = ""
        gb.db.commit()
