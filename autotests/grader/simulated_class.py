"""The students of the end-to-end test: what each one does to the released notebook.

Every function takes the released notebook (nbformat) and the paths a snooper would
try, and returns the notebook to submit (or raw bytes, for the broken file).
Expected autograded scores (of 5; the manual question is worth 2 more) are beside them.
"""

import copy

import nbformat

ADD = "def add(a, b):\n    return a + b"
MEAN = "def mean(xs):\n    return sum(xs) / len(xs)"


def cell(nb, grade_id):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return c
    raise KeyError(grade_id)


def solved(nb, add=ADD, mean=MEAN):
    nb = copy.deepcopy(nb)
    cell(nb, "add").source = add
    cell(nb, "mean").source = mean
    cell(nb, "explain").source = "Because `len([])` is 0."
    return nb


def correct(nb, paths):
    return solved(nb)


def partial(nb, paths):  # passes the visible test of mean, not the hidden ones
    return solved(nb, mean="def mean(xs):\n    return 2")


def blank(nb, paths):
    return copy.deepcopy(nb)


def infinite_loop(nb, paths):
    return solved(nb, mean="while True:\n    pass")


def memory_hog(nb, paths):
    return solved(nb, mean="def hog():\n    blocks = []\n    while True:\n"
                           "        blocks.append(bytearray(128 << 20))\nhog()")


def fork_bomb(nb, paths):
    # the bomb keeps running in the background while the tests run; the process limit
    # contains it. Its complaints go to /dev/null: nbgrader counts any stderr output
    # during a test cell as a failure, which would make this score depend on timing.
    return solved(nb, mean="import subprocess\nsubprocess.Popen(['bash', '-c', ':(){ :|:& };:'], "
                           "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n" + MEAN)


def network_call(nb, paths):
    return solved(nb, mean="import urllib.request\ndef mean(xs):\n"
                           "    urllib.request.urlopen('http://1.1.1.1/', timeout=5)\n"
                           "    return sum(xs) / len(xs)")


SNOOP = '''
import os
for path in {read!r}:
    try:
        if os.path.isdir(path):
            print("LISTED", path, os.listdir(path)[:3])
        else:
            with open(path, "rb") as fh:
                print("READABLE", path, fh.read(16))
    except Exception as err:
        print("BLOCKED", path, type(err).__name__)
for path in {write!r}:
    try:
        with open(path, "w") as fh:
            fh.write("pwned")
        print("WROTE", path)
    except Exception as err:
        print("BLOCKED", path, type(err).__name__)
print("ENVIRONMENT", dict(os.environ))
'''


def snooper(nb, paths):
    return solved(nb, add=ADD + "\n" + SNOOP.format(read=paths["read"], write=paths["write"]))


def tamperer(nb, paths):  # weakens a test and deletes the hidden one
    nb = solved(nb, mean="def mean(xs):\n    return 0")
    cell(nb, "test_mean_visible").source = "pass"
    nb.cells.remove(cell(nb, "test_mean_hidden"))
    return nb


SWALLOW_ERRORS = """
import ast
class _Swallow(ast.NodeTransformer):
    def visit_Module(self, node):
        handler = ast.ExceptHandler(type=None, name=None, body=[ast.Pass()])
        node.body = [ast.Try(body=node.body or [ast.Pass()], handlers=[handler], orelse=[], finalbody=[])]
        return ast.fix_missing_locations(node)
get_ipython().ast_transformers.append(_Swallow())
def mean(xs):
    return 0
"""


def cheater(nb, paths):  # a wrong mean, and every later cell wrapped in try/except: pass
    return solved(nb, mean=SWALLOW_ERRORS)


def leaker(nb, paths):  # a right mean that prints the source of the cell testing it
    return solved(nb, mean="def mean(xs):\n    print(get_ipython().user_ns['In'][-1])\n"
                           "    return sum(xs) / len(xs)")


def duplicated_id(nb, paths):
    nb = solved(nb)
    test = cell(nb, "test_add")
    nb.cells.insert(nb.cells.index(test) + 1, copy.deepcopy(test))
    nb.cells[nb.cells.index(test) + 1].id = "duplicate-of-test-add"
    return nb


def wrong_kernel(nb, paths):
    nb = solved(nb)
    nb.metadata["kernelspec"] = {"name": "julia-1.9", "display_name": "Julia 1.9", "language": "julia"}
    return nb


def not_json(nb, paths):
    return b'{"cells": [ {"cell_type": "code", "source": "def add(a, b'


# name -> (make, autograded score, submitted late)
ON_TIME = {
    "correct": (correct, 5), "partial": (partial, 3), "blank": (blank, 0),
    "infinite": (infinite_loop, 2), "memhog": (memory_hog, 2), "forkbomb": (fork_bomb, 5),
    "network": (network_call, 2), "snooper": (snooper, 5), "tamperer": (tamperer, 2),
    "cheater": (cheater, 2), "leaker": (leaker, 5),
    "duplicate": (duplicated_id, 5), "wrongkernel": (wrong_kernel, 5), "notjson": (not_json, 0),
}
LATE = {"late": (correct, 5), "forger": (correct, 5)}


def write_submission(make, released_path, paths):
    nb = nbformat.read(str(released_path), as_version=4)
    result = make(nb, paths)
    if isinstance(result, bytes):
        released_path.write_bytes(result)
    else:
        nbformat.write(result, str(released_path))
