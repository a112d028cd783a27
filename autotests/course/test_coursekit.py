"""The grading kit's own behaviour, each case in a fresh interpreter (``coursekit.start``
changes the package in place for the rest of a process)."""
import subprocess
import sys
import textwrap

from nbhelpers import REPO

PRELUDE = """
import os, sys
sys.path.insert(0, {course!r})
import numpy as np
import needle_kernels as ndl
import coursekit
from coursekit.withhold import WithheldError
ns = {{}}
coursekit.start("demo", {{"demo_t1": {{"Summation": "ops.Summation"}},
                          "demo_t2": {{"BroadcastTo": "ops.BroadcastTo"}}}}, namespace=ns)
"""


def run(body, env=None, prelude=PRELUDE):
    code = prelude.format(course=str(REPO / "course")) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_each_missing_part_is_reported_under_its_own_name():
    out = run("""
        for name in ("Summation", "BroadcastTo"):
            try:
                coursekit.students(name)
            except WithheldError as err:
                print(err)
    """)
    lines = out.strip().splitlines()
    assert lines[0].startswith("demo_t1: Summation is yours to write"), out
    assert lines[1].startswith("demo_t2: BroadcastTo is yours to write"), out


def test_a_test_leaves_the_notebook_globals_as_it_found_them():
    out = run("""
        class Summation(ndl.autograd.TensorOp):
            def compute(self, a):
                return a.sum()
        ns["Summation"] = Summation
        ns["kept"] = 1
        ns["shadowed"] = "mine"
        with coursekit.grading("demo_t1", "Summation"):
            ns["_made_by_the_test"] = 2
            ns["shadowed"] = "the test's"
            assert ns["BroadcastTo"] is ndl.ops.BroadcastTo      # the reference, inside
        print(sorted(k for k in ns if not k.startswith("__")), ns["shadowed"])
    """)
    assert out.strip() == "['Summation', 'kept', 'shadowed'] mine", out


def test_parts_absent_from_the_package_stay_the_students_inside_a_test():
    # a graded run's build has no package code for demo_t2: its part must not be swapped in
    out = run("""
        class Summation(ndl.autograd.TensorOp):
            pass
        class BroadcastTo(ndl.autograd.TensorOp):
            pass
        ns.update(Summation=Summation, BroadcastTo=BroadcastTo)
        with coursekit.grading("demo_t1", "Summation"):
            print(ns["BroadcastTo"] is BroadcastTo)
    """, env={"COURSEKIT_ABSENT_TASKS": "*"})
    assert out.strip() == "True", out


def test_checks_report_what_they_compare_only_in_a_graded_run():
    body = """
        import coursekit.record as record
        shown = []
        record._display = lambda mime, payload: shown.append((mime, payload))
        from coursekit.checks import close
        close(np.ones(3), np.ones(3), what="ones")
        print(len(shown), shown[0][1]["what"] if shown else "",
              record.decode(shown[0][1]["actual"]).tolist() if shown else "")
    """
    assert run(body).strip() == "0", "nothing is reported outside a graded run"
    # (the declaration made by coursekit.start above is printed by IPython's display)
    assert run(body, env={"COURSEKIT_RECORD": "1"}).strip().splitlines()[-1] == "1 ones [1.0, 1.0, 1.0]"


WRAPPERS = """
    from needle_kernels.autograd import find_topo_sort as package_find_topo_sort
    from needle_kernels.ops import Summation as package_Summation
    x = ndl.Tensor(np.ones(2, dtype=np.float32))

    def find_topo_sort(node_list):      # a wrapper: the package's, called with its own arguments
        return package_find_topo_sort(node_list)

    class Summation:
        def __init__(self, axes=None):
            self.inner = package_Summation(axes)

    ns.update(find_topo_sort=find_topo_sort, Summation=Summation)
    for call in (lambda: ndl.autograd.find_topo_sort([x]), lambda: ndl.ops.Summation((0,))):
        try:
            call()
        except WithheldError as err:
            print(err)

    calls = []
    def find_topo_sort(node_list):      # recursion through the package's name, one node fewer each time
        calls.append(len(node_list))
        return [] if not node_list else package_find_topo_sort(node_list[1:]) + [node_list[0]]

    ns["find_topo_sort"] = find_topo_sort
    print(ndl.autograd.find_topo_sort([x, x, x]) == [x, x, x], calls)
"""


def test_a_wrapper_of_the_packages_own_part_fails_at_once_and_says_why():
    prelude = PRELUDE.replace('"demo_t2": {{"BroadcastTo": "ops.BroadcastTo"}}',
                              '"demo_t2": {{"find_topo_sort": "autograd.find_topo_sort"}}')
    out = run(WRAPPERS, prelude=prelude).strip().splitlines()
    assert out[0].startswith("demo_t2: find_topo_sort is yours to write in this assignment; yours calls "
                             "the package's needle_kernels.autograd.find_topo_sort with the arguments it "
                             "was given"), out
    assert out[1].startswith("demo_t1: Summation is yours to write in this assignment; yours calls "
                             "the package's needle_kernels.ops.Summation"), out
    assert out[2] == "True [3, 2, 1, 0]", out
