"""Every assignment grades the student's own work, task by task: proven by grading variants.

For each ``course/assignments/<id>/<id>.ipynb`` a class of submissions is made from the
source and its release and graded the way an instructor grades, with ``grader autograde
-j 2`` in the sandbox:

* ``source``: the instructor's solution earns every point; ``release``: the untouched
  release earns none;
* ``aliases``: every solution cell only imports the package's version of the names it must
  define; ``subclasses``: every class subclasses the package's and every function calls the
  package's. Both earn nothing;
* ``drop_<task>``: the solution with one task's solution cells put back to their released
  stubs loses exactly that task's points, cell by cell.

hw1 also gets one submission per trick a solution cell can simply play (reload the module,
exec the package's source, copy, re-export, redefine the test helpers, open a grading scope
of its own) on task hw1_t2: each earns nothing for hw1_t2 and costs nothing elsewhere. And
three submissions for the similarity notes: the package's Summation pasted with renamed
variables, two students with the same distinctive code, and an honest different solution
(``autotests/grader/test_similarity.py`` calibrates the detection on many more).

These read the notebooks, so an assignment added later is proven by the same tests.
"""
import csv
import inspect
import io
import re
import sys
import time
import tokenize

import nbformat
import pytest

from class_grading import autograded_errors, class_course, submit
from nbhelpers import ASSIGNMENTS, REPO, assignment_ids

sys.path.insert(0, str(REPO / "autotests" / "grader"))
sys.path.insert(0, str(REPO))
from grader_testkit import gradebook_scores, grader, run_once  # noqa: E402

sys.path.insert(0, str(REPO / "autotests"))
from figures import report_figure  # noqa: E402

from grader.similarity import definitions  # noqa: E402

sys.path.insert(0, str(REPO / "autotests" / "grader" / "fixtures"))
from submissions import fixtures as _fixtures, load as load_fixture, submission as fixture_submission  # noqa: E402


def honest_fixtures(aid):
    return _fixtures("honest", aid)

IDS = assignment_ids()
PACKAGE = "needle_kernels"
TRICK_TASK = "hw1_t2"


def meta(cell):
    return cell.metadata.get("nbgrader", {})


def task_of(grade_id):
    m = re.match(r"^([A-Za-z0-9]+_t\d+)(_|$)", grade_id or "")
    return m.group(1) if m else None


def source_nb(aid):
    return nbformat.read(ASSIGNMENTS / aid / f"{aid}.ipynb", as_version=4)


def declared_tasks(aid):
    """{task: {name: first package path}} from the notebook's coursekit.start call."""
    import ast

    first = next(c for c in source_nb(aid).cells if c.cell_type == "code")
    for node in ast.walk(ast.parse(first.source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "start":
            tasks = ast.literal_eval(node.args[1])
            # a part with no package twin (an empty tuple) has nothing to alias
            return {t: {n: (p if isinstance(p, str) else (p[0] if p else None)) for n, p in names.items()}
                    for t, names in tasks.items()}
    raise AssertionError(f"{aid}: the first code cell does not call coursekit.start(...)")


def split_path(path):
    """(module, attributes) of a dotted path under the package: a module's attribute
    (``ops.Summation``) or a class's (``backend_ndarray.ndarray.NDArray.reshape``)."""
    import importlib

    names = f"{PACKAGE}.{path}".split(".")
    for split in range(len(names) - 1, 0, -1):
        try:
            importlib.import_module(".".join(names[:split]))
        except ModuleNotFoundError:
            continue
        return ".".join(names[:split]), names[split:]
    raise LookupError(path)


def package_object(path):
    import importlib

    module, attributes = split_path(path)
    obj = importlib.import_module(module)
    for attribute in attributes:
        obj = getattr(obj, attribute)
    return obj


def import_lines(path, alias):
    """Lines binding ``alias`` to the package object at ``path``."""
    module, attributes = split_path(path)
    if len(attributes) == 1:
        return [f"from {module} import {attributes[0]} as {alias}"]
    return [f"from {module} import {attributes[0]} as _package_owner",
            f"{alias} = _package_owner.{'.'.join(attributes[1:])}"]


def defined_names(source):
    return list(definitions(source))


def with_cells(nb, replace):
    """A copy of ``nb`` whose solution cells ``replace(cell)`` rewrites (None keeps the cell)."""
    out = nbformat.from_dict(nb)
    for cell in out.cells:
        if meta(cell).get("solution"):
            new = replace(cell)
            if new is not None:
                cell.source = new
    return out


def alias_cell(parts, released):
    """Each solution cell only imports the package's versions of its names (a cell whose
    names have no package twin is left as released: its author wrote nothing)."""
    def replace(cell):
        lines = []
        for name in defined_names(cell.source):
            if parts.get(name):
                lines += import_lines(parts[name], name)
        return "\n".join(lines) if lines else released[meta(cell)["grade_id"]]
    return replace


def subclass_cell(parts, released):
    def replace(cell):
        lines = []
        for name in defined_names(cell.source):
            if not parts.get(name):
                continue
            lines += import_lines(parts[name], f"_package_{name}")
            if inspect.isclass(package_object(parts[name])):
                lines.append(f"class {name}(_package_{name}):\n    pass")
            else:
                lines.append(f"def {name}(*args, **kwargs):\n    return _package_{name}(*args, **kwargs)")
        return "\n".join(lines) if lines else released[meta(cell)["grade_id"]]
    return replace


def trick_cells(parts):
    """hw1_t2's solution cell rewritten by each trick (names: the parts of hw1_t2)."""
    names = [n for n, _ in parts]
    module = f"{PACKAGE}.ops.ops_mathematic"
    listed = ", ".join(names)
    return {
        "trick_reload": f"import importlib\nimport {module} as _m\n_m = importlib.reload(_m)\n"
                        f"{listed} = " + ", ".join(f"_m.{n}" for n in names),
        "trick_exec": f"import inspect\nimport {module} as _m\n"
                      f"for _name in {names!r}:\n"
                      "    _ns = dict(vars(_m), __name__='__main__')\n"
                      "    exec(inspect.getsource(getattr(_m, _name)), _ns)\n"
                      "    globals()[_name] = _ns[_name]",
        "trick_copy": f"import copy\nimport {module} as _m\n"
                      + "\n".join(f"{n} = copy.deepcopy(_m.{n})" for n in names),
        "trick_reexport": f"from {PACKAGE} import {listed}",
        "trick_helpers": "import contextlib\n"
                         "def check_op(*args, **kwargs):\n    return None\n"
                         "def close(*args, **kwargs):\n    return None\n"
                         "@contextlib.contextmanager\ndef grading(*args, **kwargs):\n    yield\n"
                         + "\n".join(f"class {n}(TensorOp):\n    def __init__(self, *args):\n        pass"
                                     for n in names),
        "trick_own_scope": "import coursekit\n" + "\n".join(
            f"class {n}(TensorOp):\n"
            f"    def __init__(self, *args):\n        self.args = args\n"
            f"    def compute(self, *arrays):\n"
            f"        with coursekit.grading('hw1_t1', 'Negate'):\n"
            f"            return ndl.ops.{n}(*self.args).compute(*arrays)\n"
            f"    def gradient(self, out_grad, node):\n"
            f"        with coursekit.grading('hw1_t1', 'Negate'):\n"
            f"            return ndl.ops.{n}(*self.args).gradient(out_grad, node)" for n in names),
    }


def renamed(code, mapping):
    """``code`` with the identifiers in ``mapping`` renamed and every string replaced."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.NAME and tok.string in mapping:
            tok = tok._replace(string=mapping[tok.string])
        elif tok.type == tokenize.STRING:
            tok = tok._replace(string='"""pasted"""' if tok.string.startswith('"""') else '"x"')
        out.append(tok)
    return tokenize.untokenize(out)


def replace_class(source, name, new_code):
    start = source.index(f"class {name}(")
    end = source.find("\n\n\nclass ", start)
    end = len(source) if end < 0 else end
    return source[:start] + new_code.rstrip() + "\n" + source[end:]


TWIN_SUMMATION = '''class Summation(TensorOp):
    """Sum of the entries over some axes, written with numpy's reduce."""
    def __init__(self, axes=None):
        self.axes = (axes,) if isinstance(axes, int) else (None if axes is None else tuple(axes))

    def compute(self, a):
        total = np.add.reduce(a, axis=self.axes, dtype=np.float64)
        return np.asarray(total, dtype=a.dtype)

    def gradient(self, out_grad, node):
        shape = node.inputs[0].shape
        summed = set(range(len(shape))) if self.axes is None else {ax % len(shape) for ax in self.axes}
        kept_shape = tuple(1 if axis in summed else size for axis, size in enumerate(shape))
        return BroadcastTo(shape)(Reshape(kept_shape)(out_grad))'''

HONEST_SUMMATION = '''class Summation(TensorOp):
    """Add entries along the given axes."""
    def __init__(self, axes=None):
        self.axes = (axes,) if isinstance(axes, int) else (None if axes is None else tuple(axes))

    def compute(self, a):
        result = a
        axes = range(a.ndim) if self.axes is None else self.axes
        for axis in sorted((ax % a.ndim for ax in axes), reverse=True):
            result = result.sum(axis=axis)
        return np.asarray(result, dtype=a.dtype)

    def gradient(self, out_grad, node):
        in_shape = node.inputs[0].shape
        if self.axes is None:
            return BroadcastTo(in_shape)(Reshape((1,) * len(in_shape))(out_grad))
        shape = list(in_shape)
        for ax in self.axes:
            shape[ax % len(in_shape)] = 1
        return BroadcastTo(in_shape)(Reshape(tuple(shape))(out_grad))'''


def variants(aid, release):
    """{student: notebook} of the class graded for ``aid``."""
    src = source_nb(aid)
    tasks = declared_tasks(aid)
    parts = {name: path for names in tasks.values() for name, path in names.items()}
    released = {meta(c)["grade_id"]: c.source for c in release.cells if meta(c).get("solution")}
    out = {"source": src, "release": release,
           "aliases": with_cells(src, alias_cell(parts, released)),
           "subclasses": with_cells(src, subclass_cell(parts, released))}
    for task in tasks:
        out[f"drop_{task}"] = with_cells(
            src, lambda cell, task=task: released[meta(cell)["grade_id"]] if task_of(meta(cell)["grade_id"]) == task else None)
    if aid == TRICK_TASK.split("_")[0]:
        trick_parts = list(tasks[TRICK_TASK].items())
        for student, code in trick_cells(trick_parts).items():
            out[student] = with_cells(
                src, lambda cell, code=code: code if task_of(meta(cell)["grade_id"]) == TRICK_TASK else None)
        package_code = inspect.getsource(package_object(parts["Summation"]))
        pasted = renamed(package_code, {"a": "x_in", "out_grad": "grad_out", "node": "nd", "axes": "dims", "kept": "keep"})
        for student, code in [("paste_renamed", pasted), ("twin_a", TWIN_SUMMATION), ("twin_b", TWIN_SUMMATION),
                              ("honest_c", HONEST_SUMMATION)]:
            out[student] = with_cells(src, lambda cell, code=code: replace_class(cell.source, "Summation", code)
                                      if "class Summation(" in cell.source else None)
        # the rest of a class of 30, handing in the instructor's solution
        for i in range(30 - len(out)):
            out[f"student_{i:02d}"] = src
    # solutions written independently of the instructor's, as different students write them
    for name, path in honest_fixtures(aid).items():
        out[f"honest_{name.split('_', 1)[1]}"] = fixture_submission(aid, load_fixture(path))
    return out


def grade_class(root, aid):
    """Set up a course, submit every variant, autograde with -j 2; returns what the tests read."""
    course, home = class_course(root, aid)
    subs = variants(aid, nbformat.read(course / "release" / aid / f"{aid}.ipynb", as_version=4))
    submit(course, aid, subs)
    t0 = time.perf_counter()
    log = grader(["autograde", aid, "-j", "2"], course, home, timeout=3000)
    seconds = time.perf_counter() - t0
    similarity = grader(["similarity", aid], course, home).stdout if aid == "hw1" else ""
    export = course / "grades.csv"
    grader(["export", aid, "--to", export], course, home)
    report_figure(f"{aid}: {len(subs)} submissions autograded in sandboxes with -j 2 in {seconds:.0f} s")
    # speed tasks print their measured ratio ("... is 7.0x faster"): show it with the suite's figures
    for line in printed_ratios(course / "autograded" / "source" / aid / f"{aid}.ipynb"):
        report_figure(f"{aid} (instructor's solution, graded): {line}")
    return {"scores": gradebook_scores(course, aid), "students": sorted(subs), "seconds": seconds,
            "log": log.stdout, "similarity": similarity, "export": export.read_text(),
            "errors": autograded_errors(course, aid, subs, tail=300)}


def printed_ratios(path):
    if not path.exists():
        return
    for cell in nbformat.read(path, as_version=4).cells:
        for o in cell.get("outputs", []):
            for line in o.get("text", "").splitlines() if o.get("output_type") == "stream" else ():
                if re.search(r"\d(\.\d+)?x faster", line):
                    yield f"[{meta(cell).get('grade_id', '?')}] {line.strip()}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    cache = {}

    def get(aid):
        if aid not in cache:
            cache[aid] = run_once(tmp_path_factory, f"own_work_{aid}",
                                  lambda: grade_class(tmp_path_factory.mktemp(f"own_work_{aid}"), aid))
        return cache[aid]
    return get


def points(aid):
    return {meta(c)["grade_id"]: float(meta(c)["points"]) for c in source_nb(aid).cells if meta(c).get("grade")}


def cells_of(scores, student):
    got = scores.get(student)
    assert got is not None, f"{student} was not graded"
    return {k: v for k, v in got.items() if not k.startswith("_")}


@pytest.mark.parametrize("aid", IDS)
def test_declares_its_withheld_parts(aid):
    """Every task withholds something, every withheld object exists and has a docstring the
    notebook does not repeat (the kit tells an exec'd copy by its code and docstring)."""
    tasks = declared_tasks(aid)
    nb = source_nb(aid)
    graded_tasks = {task_of(meta(c)["grade_id"]) for c in nb.cells if meta(c).get("grade")}
    assert graded_tasks <= set(tasks), f"{aid}: tasks without withheld parts: {graded_tasks - set(tasks)}"
    notebook_text = "\n".join(c.source for c in nb.cells)
    for task, names in tasks.items():
        for name, path in names.items():
            if path is None:
                continue
            obj = package_object(path)
            doc = inspect.getdoc(obj)
            if hasattr(obj, "__code__") or inspect.isclass(obj):
                assert doc, f"{aid} {task}: {PACKAGE}.{path} has no docstring"
                assert doc.splitlines()[0] not in notebook_text, \
                    f"{aid} {task}: the notebook repeats the docstring of {PACKAGE}.{path}"
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert meta(first).get("locked"), f"{aid}: the first code cell (coursekit.start) must be locked"


@pytest.mark.parametrize("aid", IDS)
def test_every_test_cell_names_what_it_grades(aid):
    for cell in source_nb(aid).cells:
        if meta(cell).get("grade"):
            gid = meta(cell)["grade_id"]
            assert "from coursekit.checks import *" in cell.source, f"{gid}: test cells re-import their checks"
            assert re.search(rf'with grading\("{task_of(gid)}"', cell.source), f"{gid}: no grading scope"


@pytest.mark.slow
@pytest.mark.parametrize("aid", IDS)
def test_solution_full_release_and_package_nothing(aid, graded):
    result = graded(aid)
    expected = points(aid)
    for student in [s for s in result["students"] if s == "source" or s.startswith("student_")]:
        full = cells_of(result["scores"], student)
        assert full == expected, f"{aid}: {student}'s solution earns {full}\n{result['errors'].get(student)}"
    for student in ("release", "aliases", "subclasses"):
        earned = {g: s for g, s in cells_of(result["scores"], student).items() if s}
        assert not earned, f"{aid}: {student} earns {earned}\n{result['errors'].get(student)}"


@pytest.mark.slow
@pytest.mark.parametrize("aid", IDS)
def test_each_task_costs_only_its_own_points(aid, graded):
    result = graded(aid)
    expected = points(aid)
    for task in declared_tasks(aid):
        got = cells_of(result["scores"], f"drop_{task}")
        want = {g: (0.0 if task_of(g) == task else p) for g, p in expected.items()}
        assert got == want, (f"{aid}: without {task} the grades are {got}, expected {want}\n"
                             f"{result['errors'].get(f'drop_{task}')}")


@pytest.mark.slow
@pytest.mark.parametrize("trick", ["trick_reload", "trick_exec", "trick_copy", "trick_reexport",
                                   "trick_helpers", "trick_own_scope"])
def test_a_trick_earns_nothing(trick, graded):
    aid = TRICK_TASK.split("_")[0]
    result = graded(aid)
    expected = points(aid)
    got = cells_of(result["scores"], trick)
    want = {g: (0.0 if task_of(g) == TRICK_TASK else p) for g, p in expected.items()}
    assert got == want, f"{trick}: {got}, expected {want}\n{result['errors'].get(trick)}"


@pytest.mark.slow
def test_similarity_notes(graded):
    result = graded("hw1")
    printed = result["similarity"]
    assert re.search(r"paste_renamed: hw1_t2_\w+ Summation = the package's needle_kernels\.ops\.\w+\.Summation "
                     r"\(\d+%\)", printed), printed
    assert re.search(r"hw1_t2_\w+ Summation: twin_a = twin_b \(\d+%\)", printed), printed
    assert "honest_c" not in printed, printed
    assert "trick_own_scope: hw1_t2" in printed and "imports the grading kit" in printed, printed
    assert re.search(r"trick_exec: hw1_t2_\w+ runs code from a string \(exec\)", printed), printed
    assert re.search(r"trick_reload: hw1_t2_\w+ imports modules by hand \(importlib\)", printed), printed
    rows = {line.split(",")[0]: line for line in result["export"].splitlines()[1:]}
    assert re.search(r"Summation is \d+% the package's needle_kernels\.ops\.\w+\.Summation", rows["paste_renamed"])
    assert "overlaps" in rows["twin_a"] and "twin_b's" in rows["twin_a"]
    assert "Summation" not in rows["honest_c"]


@pytest.mark.slow
@pytest.mark.parametrize("aid", IDS)
def test_honest_solutions_earn_the_points_of_what_they_write_and_no_note(aid, graded):
    names = honest_fixtures(aid)
    assert names, f"{aid}: write an honest solution under autotests/grader/fixtures/honest/ ({aid}_NAME.py)"
    result = graded(aid)
    expected = points(aid)
    rows = {row["student_id"]: row for row in csv.DictReader(io.StringIO(result["export"]))}
    for name, path in names.items():
        student = f"honest_{name.split('_', 1)[1]}"
        written = {task_of(g) for g in load_fixture(path)}
        got = cells_of(result["scores"], student)
        want = {g: p for g, p in expected.items() if task_of(g) in written}
        assert {g: got[g] for g in want} == want, f"{aid}: {student} earns {got}\n{result['errors'].get(student)}"
        assert not rows[student]["instructor_notes"], f"{student} has instructor notes: {rows[student]}"
