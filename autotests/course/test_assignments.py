"""The nbgrader assignments: consistent task ids, a clean release, and grades that prove both ways.

For every ``course/assignments/<id>/<id>.ipynb`` (the nbgrader *source*, with solutions and hidden
tests):

* static checks: nbgrader metadata, one task id per graded part used in its heading, its grade ids
  and its points; balanced solution and hidden-test regions;
* ``nbgrader generate_assignment`` (with the course's config) gives a release with no solution or
  hidden-test text, whose stubs name their task id;
* by hand with plain ``nbgrader autograde`` and the course's config, as ``course/README.md``
  shows, the source notebook submitted as is earns every point and the released notebook
  submitted untouched earns none (slow). One assignment proves this path: the config is the same
  for all, and ``test_own_work.py`` grades every assignment's solution and release the way a
  class is graded, with ``grader autograde`` in the sandbox.
"""
import re
from pathlib import Path

import nbformat
import pytest

from nbhelpers import (ASSIGNMENTS, assignment_ids, grade_cells, grades, make_course, nbgrader,
                       solution_cells, submit)

IDS = assignment_ids()
# the assignment graded by hand with plain nbgrader: the one whose class grades fastest
BY_HAND = "gan"
HEADING = re.compile(r"^#+\s*Task\s+`?(?P<task>[a-z0-9]+_t\d+)`?\b.*\((?P<points>\d+(?:\.\d+)?)\s+points?\)",
                     re.M)
TABLE_ROW = re.compile(r"^\|\s*`(?P<task>[a-z0-9]+_t\d+)`\s*\|.*\|\s*(?P<points>\d+(?:\.\d+)?)\s*\|\s*$", re.M)
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def source(aid):
    return nbformat.read(ASSIGNMENTS / aid / f"{aid}.ipynb", as_version=4)


def meta(cell):
    return cell.metadata.get("nbgrader", {})


def task_of(grade_id, aid):
    m = re.match(rf"^({re.escape(aid)}_t\d+)(_|$)", grade_id)
    return m.group(1) if m else None


def regions(text, begin, end):
    """The lines strictly inside every ``begin`` ... ``end`` region of ``text``."""
    out, inside = [], False
    for line in text.splitlines():
        if begin in line:
            assert not inside, f"nested {begin}"
            inside = True
        elif end in line:
            assert inside, f"{end} without {begin}"
            inside = False
        elif inside:
            out.append(line)
    assert not inside, f"{begin} without {end}"
    return out


def test_there_are_assignments():
    assert {"hw0", "hw1", "hw2"} <= set(IDS), IDS


@pytest.mark.parametrize("aid", IDS)
def test_nbgrader_metadata(aid):
    nb = source(aid)
    seen = set()
    for cell in nb.cells:
        m = meta(cell)
        if not m:
            assert not any(k in cell.source for k in MARKERS), "solution/hidden markers outside an nbgrader cell"
            continue
        assert m.get("schema_version") == 3
        gid = m.get("grade_id")
        assert gid and re.fullmatch(r"[A-Za-z0-9_-]+", gid), gid
        assert gid not in seen, f"duplicate grade_id {gid}"
        seen.add(gid)
        if m.get("grade"):
            assert m.get("locked") and not m.get("solution"), f"{gid}: a test cell must be locked, not a solution"
            assert float(m.get("points", 0)) > 0, f"{gid}: no points"
            assert cell.cell_type == "code"
        if m.get("solution"):
            assert not m.get("locked"), gid
            assert "BEGIN SOLUTION" in cell.source, f"{gid}: solution cell without a solution region"
        if "BEGIN SOLUTION" in cell.source:
            assert m.get("solution"), f"{gid}: solution region in a non-solution cell"
        if "HIDDEN TESTS" in cell.source:
            assert m.get("grade"), f"{gid}: hidden tests in a non-test cell"
        regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")
        regions(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


@pytest.mark.parametrize("aid", IDS)
def test_task_ids_agree(aid):
    """Headings, grade ids, points and the overview table all name the same tasks."""
    nb = source(aid)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    headings = {m["task"]: float(m["points"]) for m in HEADING.finditer(md)}
    assert headings, f"{aid}: no '## Task {aid}_tN — ... (N points)' headings"
    assert all(t.startswith(aid + "_t") for t in headings), headings
    solutions, points = {}, {}
    for cell in nb.cells:
        m = meta(cell)
        if not (m.get("grade") or m.get("solution")):
            continue
        task = task_of(m["grade_id"], aid)
        assert task, f"grade_id {m['grade_id']!r} does not start with a task id of {aid}"
        assert task in headings, f"{m['grade_id']}: task {task} has no heading"
        if m.get("solution"):
            solutions[task] = solutions.get(task, 0) + 1
        if m.get("grade"):
            points[task] = points.get(task, 0) + float(m["points"])
            assert m["grade_id"].startswith(task + "_tests"), m["grade_id"]
    for task, pts in headings.items():
        assert solutions.get(task), f"{task}: no solution cell"
        assert task in points, f"{task}: no graded test cell"
        assert points[task] == pts, f"{task}: heading says {pts} points, test cells give {points[task]}"
    table = {m["task"]: float(m["points"]) for m in TABLE_ROW.finditer(md)}
    if table:
        assert table == headings, f"overview table {table} != headings {headings}"
    for cell in grade_cells(nb):
        assert "BEGIN HIDDEN TESTS" in cell.source, f"{meta(cell)['grade_id']}: no hidden tests"


@pytest.fixture(scope="module")
def release_dirs(tmp_path_factory):
    cache = {}

    def get(aid):
        if aid not in cache:
            root = tmp_path_factory.mktemp(f"course_{aid}")
            make_course(root, aid)
            nbgrader(root, "generate_assignment", aid, "--force")
            cache[aid] = root
        return cache[aid]
    return get


@pytest.mark.parametrize("aid", IDS)
def test_release_has_no_solutions_or_hidden_tests(aid, release_dirs):
    root = release_dirs(aid)
    rel = nbformat.read(root / "release" / aid / f"{aid}.ipynb", as_version=4)
    src = source(aid)
    released_text = "\n".join(c.source for c in rel.cells)
    for marker in MARKERS:
        assert marker not in released_text, f"release contains {marker!r}"
    # text the release may legitimately contain: everything outside the secret regions
    # (a task's description may spell out the structure its solution then follows)
    public = []
    for cell in src.cells:
        hidden = set(regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")) | set(
            regions(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
        public += [l for l in cell.source.splitlines() if l not in hidden]
    public = "\n".join(public)
    secret = []
    for cell in src.cells:
        secret += regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")
        secret += regions(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
    leaked = [l.strip() for l in secret if len(l.strip()) >= 16 and l.strip() not in public
              and l.strip() in released_text]
    assert not leaked, f"solution or hidden-test lines in the release: {leaked[:5]}"
    for cell in rel.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


@pytest.mark.parametrize("aid", IDS)
def test_release_stubs_name_their_task(aid, release_dirs):
    root = release_dirs(aid)
    rel = nbformat.read(root / "release" / aid / f"{aid}.ipynb", as_version=4)
    cells = solution_cells(rel)
    assert len(cells) == len(solution_cells(source(aid)))
    for cell in cells:
        task = task_of(meta(cell)["grade_id"], aid)
        assert f"# YOUR CODE HERE ({task})" in cell.source, meta(cell)["grade_id"]
        assert f'raise NotImplementedError("{task}: ' in cell.source, meta(cell)["grade_id"]
    src_grades = {meta(c)["grade_id"]: meta(c)["points"] for c in grade_cells(source(aid))}
    rel_grades = {meta(c)["grade_id"]: meta(c)["points"] for c in grade_cells(rel)}
    assert src_grades == rel_grades


def _autograde(tmp_path, aid, which):
    root = make_course(tmp_path, aid)
    nbgrader(root, "generate_assignment", aid, "--force")
    nb = (ASSIGNMENTS / aid / f"{aid}.ipynb") if which == "source" else (root / "release" / aid / f"{aid}.ipynb")
    submit(root, aid, which, nb)
    log = nbgrader(root, "autograde", aid, "--student", which, "--force")
    return grades(root, aid, which), log


@pytest.mark.slow
def test_solution_earns_full_marks_by_hand(tmp_path):
    scores, log = _autograde(tmp_path, BY_HAND, "source")
    expected = {meta(c)["grade_id"]: float(meta(c)["points"]) for c in grade_cells(source(BY_HAND))}
    assert set(scores) == set(expected)
    missing = {g: s for g, s in scores.items() if s[0] != s[1]}
    if missing:
        autograded = tmp_path / "autograded" / "source" / BY_HAND / f"{BY_HAND}.ipynb"
        pytest.fail(f"{BY_HAND}: the solution loses points on {missing}\n{_errors(autograded)}")
    assert sum(s for s, _ in scores.values()) == sum(expected.values())


@pytest.mark.slow
def test_untouched_release_earns_nothing_by_hand(tmp_path):
    scores, log = _autograde(tmp_path, BY_HAND, "release")
    assert scores, "no grades recorded"
    earned = {g: s for g, s in scores.items() if s[0]}
    assert not earned, f"{BY_HAND}: the untouched release earns points on {earned}"


def _errors(path):
    if not Path(path).is_file():
        return "(no autograded notebook)"
    nb = nbformat.read(path, as_version=4)
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out.append(f"[{meta(cell).get('grade_id', '?')}] {o['ename']}: {o['evalue']}")
    return "\n".join(out)
