"""A check, run before every autograded test cell, that the submission has not changed
how cells run or how their checks decide.

A notebook shares one Python process with the tests that grade it, so a submission can
rewrite that process: add an IPython AST transformer that wraps every later cell in
`try: ... except: pass`, install a custom exception handler, replace the shell's
`run_cell`, or make `numpy.testing.assert_allclose` return without checking. Each of
these turns failing hidden tests into full marks without an error in any output.

The worker runs `probe_source(nonce)` as an extra cell (not part of the notebook) once
right after the kernel starts, before any submitted code, and again before every test
cell. The probe prints one line: the nonce and the identities of the objects that
decide how a cell runs and whether a check passes. The worker keeps the first answer
outside the kernel and compares each later one with it; a missing nonce (the probe did
not run as sent), a changed identity or any installed transformer or handler stops the
notebook, and the remaining cells score 0 with the reason in their output.

This raises the bar; it is not a proof. Code that rewrites the kernel's message
handling before the first test cell could still answer for the probe; such code is
plainly visible to whoever reads the submission.
"""

import json

# Objects whose replacement changes how a cell runs or what a check decides.
SHELL_METHODS = ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "showtraceback",
                 "_showtraceback", "transform_cell", "transform_ast", "should_run_async")
KERNEL_METHODS = ("do_execute", "execute_request", "send_response")
BUILTINS = ("abs", "all", "any", "float", "getattr", "hasattr", "int", "isinstance", "len", "max",
            "min", "print", "range", "round", "sorted", "sum", "type", "zip", "AssertionError",
            "Exception")
CHECKS = {"math": ("isclose",),
          "numpy": ("allclose", "isclose", "array_equal", "all", "any", "abs", "max"),
          "numpy.testing": ("assert_allclose", "assert_array_equal", "assert_array_almost_equal",
                            "assert_equal", "assert_almost_equal", "assert_array_less")}
# What carries a check's values to the grader (coursekit.record, through IPython's display):
# replaced, or its code swapped in place, it could report the expected value as the student's.
# Once imported (by the notebook, not by the probe: the kit must be imported after the kernel
# is set up as the notebook sets it up), each must still run code from its own module's file.
REPORTERS = {"coursekit.record": ("check", "failure", "begin_case", "encode", "_display", "recording"),
             "coursekit.checks": ("close", "case", "check_op", "numerical_gradients"),
             "needle_kernels.gradcheck": ("numerical_gradients", "partial_derivative"),
             "IPython.display": ("display",),
             "IPython.core.display_functions": ("display", "publish_display_data")}

_PROBE = r'''
def _grader_probe(nonce):
    import builtins, importlib, json, sys
    ip = get_ipython()
    report = {"nonce": nonce, "ids": {}, "problems": []}
    if list(ip.ast_transformers):
        report["problems"].append("an AST transformer was installed")
    if list(ip.input_transformers_post):
        report["problems"].append("an input transformer was installed")
    if ip.custom_exceptions:
        report["problems"].append("a custom exception handler was installed")
    for owner, names in ((ip, SHELL), (getattr(ip, "kernel", None), KERNEL)):
        if owner is None:
            continue
        for name in names:
            if name in vars(owner):  # an instance override (ipykernel sets some itself)
                report["ids"][f"{type(owner).__name__}().{name}"] = id(vars(owner)[name])
            report["ids"][f"{type(owner).__name__}.{name}"] = id(getattr(type(owner), name, None))
    for name in BUILTINS:
        report["ids"][f"builtins.{name}"] = id(getattr(builtins, name, None))
    for module_name, names in CHECKS.items():
        try:
            module = importlib.import_module(module_name)
        except Exception:
            continue
        for name in names:
            report["ids"][f"{module_name}.{name}"] = id(getattr(module, name, None))
    for module_name, names in REPORTERS.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in names:
            found = getattr(module, name, None)
            home = sys.modules.get(getattr(found, "__module__", None) or "")
            # a class (a context manager) is judged by the methods that run
            methods = ([vars(found).get(m) for m in ("__init__", "__enter__", "__exit__")]
                       if isinstance(found, type) else [found])
            codes = [getattr(m, "__code__", None) for m in methods]
            if (home is None or home.__name__.split(".")[0] != module_name.split(".")[0]
                    or any(c is None or c.co_filename != getattr(home, "__file__", None) for c in codes)):
                report["problems"].append(f"{module_name}.{name} is not the code of its module")
    sys.stdout.write("GRADER-PROBE " + json.dumps(report) + "\n")
_grader_probe(NONCE)
del _grader_probe
'''


def probe_source(nonce: str) -> str:
    """The probe cell's code for one nonce (the tables inlined, nothing kept in the kernel)."""
    return (_PROBE.replace("SHELL", repr(SHELL_METHODS)).replace("KERNEL", repr(KERNEL_METHODS))
            .replace("BUILTINS", repr(BUILTINS)).replace("CHECKS", repr(CHECKS))
            .replace("REPORTERS", repr(REPORTERS))
            .replace("NONCE", repr(nonce)))


def read_report(outputs, nonce: str):
    """The probe's report from its cell outputs, or None when it did not answer as sent."""
    if any(out.get("output_type") == "error" for out in outputs):
        return None
    text = "".join(out.get("text", "") for out in outputs
                   if out.get("output_type") == "stream" and out.get("name") == "stdout")
    found = [line for line in text.splitlines() if line.startswith("GRADER-PROBE ")]
    if len(found) != 1:
        return None
    try:
        report = json.loads(found[0][len("GRADER-PROBE "):])
    except ValueError:
        return None
    return report if isinstance(report, dict) and report.get("nonce") == nonce else None


def baseline_problem(baseline):
    """Why the first probe, taken before any submitted code, cannot serve as a baseline.

    None when it can. The kernel is fresh at that point, so a missing answer or a report
    of an installed transformer means the grading environment itself is broken (a startup
    file, a site customisation); grading on would skip or misjudge every later check.
    """
    if baseline is None:
        return ("the grading kernel did not answer the integrity check before the notebook ran; "
                "nothing was graded (check the kernel's start-up files and environment)")
    if baseline.get("problems"):
        return ("the grading kernel was altered before the notebook ran ("
                + "; ".join(baseline["problems"][:3]) + "); nothing was graded")
    return None


def tampering(baseline: dict, report) -> list:
    """What changed since the baseline report, as sentences (empty when nothing did)."""
    if report is None:
        return ["the integrity check before this test cell did not run as sent"]
    problems = list(report.get("problems", []))
    ids = report.get("ids", {})
    before = baseline.get("ids", {})
    for name, ident in ids.items():
        # a changed identity, or an override that was not there when the kernel started
        if (name in before and before[name] != ident) or (name not in before and "()." in name):
            problems.append(f"{name} was replaced")
    return problems
