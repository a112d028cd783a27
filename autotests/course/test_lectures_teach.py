"""Lectures teach, assignments test: no lecture cell holds an assignment's graded solution.

Each assignment's solution (what its ``### BEGIN SOLUTION`` regions add to the released
notebook, definition by definition) is compared with the lectures' code by the machinery that
compares submissions (``grader.similarity``), both ways: a solution that a lecture cell covers
past the threshold could be pasted from the lecture, and a lecture definition that a solution
covers past it is a piece of the solution, so either way the lecture gives it away.
"""
import sys

from nbhelpers import LECTURES, REPO, assignment_ids

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "autotests" / "grader" / "fixtures"))
import submissions  # noqa: E402

from grader import similarity as sim  # noqa: E402


def solutions_in_lectures(lectures=LECTURES):
    """{(lecture cell, assignment, grade id, definition): percent} past the threshold (a kernel of a
    CUDA source counts as its cell)."""
    found = {}
    cells = sim.lecture_cells(lectures)
    for aid in assignment_ids():
        comparison = sim.Comparison(sim.given_code(submissions.release_notebook(aid)), lectures=lectures)
        comparison.add_student("solution", submissions.instructor(aid))
        for gid, name, fp in comparison.units["solution"]:
            for percent, label, _ in comparison.lectures.matches(fp):
                add(found, label, aid, gid, name, percent)
        # the lecture's definitions, less what the release gives everyone, within a solution
        for label, source in cells:
            for _, _, fp in sim.units_of({label: source}, comparison.boilerplate):
                for percent, (_, gid, name), _ in comparison.students.matches(fp):
                    add(found, label, aid, gid, name, percent)
    return found


def add(found, label, aid, gid, name, percent):
    key = (label.split(" [kernel")[0], aid, gid, name.split(" [kernel")[0])
    found[key] = max(percent, found.get(key, 0))


def test_no_lecture_gives_away_a_solution():
    pairs = {}
    for (label, aid, gid, name), percent in sorted(solutions_in_lectures().items()):
        pairs.setdefault((label, f"{aid} {gid}"), []).append(f"{name} {percent}%")
    assert not pairs, "lecture cells that hold an assignment's graded solution:\n" + "\n".join(
        f"  {label}  ~  {cell}: {', '.join(names)}" for (label, cell), names in sorted(pairs.items()))
