"""`grader doctor`: is this machine ready to grade? Sandbox, exchange, kernel, gradebook, versions."""

import os
import stat
import sys
from pathlib import Path

from grader.sandbox.confinement import diagnose


def checks(course=None):
    """[(ok, topic, detail)]; ok is True, False (blocks grading) or None (information)."""
    import jupyter_client
    import nbgrader

    from grader.settings import Sandbox

    found = [(None, "versions", f"python {sys.version.split()[0]} ({sys.executable}), "
                                f"nbgrader {nbgrader.__version__}, jupyter_client {jupyter_client.__version__}")]
    config = course.config if course else None
    box = Sandbox(config=config) if config else Sandbox()
    states = {mode: diagnose(mode) for mode in ("bwrap", "unshare")}
    results = {mode: (state == "works", detail) for mode, (state, detail) in states.items()}
    for mode, (state, detail) in states.items():
        # a machine that forbids namespaces only blocks grading when the config insists on
        # that mode; a tool the machine allows but the grader cannot start is always an error
        ok = True if state == "works" else (False if state == "grader-fault" or box.mode == mode else None)
        found.append((ok, f"sandbox {mode}", detail))
    if box.mode == "none":
        active = (None, "WARNING: c.Sandbox.mode = 'none': submissions run unconfined")
    elif box.mode == "auto":
        usable = [m for m in ("bwrap", "unshare") if results[m][0]]
        active = (bool(usable), f"active: {usable[0]}" if usable else "no sandbox can run here")
    else:
        active = (results[box.mode][0], f"active: {box.mode}" if results[box.mode][0] else
                  f"{box.mode} is configured but unusable")
    found.append((active[0], "sandbox", active[1] + f" (memory {box.memory_mb} MiB, {box.max_processes} "
                                                    f"processes, files {box.max_file_mb} MiB, "
                                                    f"budget {box.notebook_budget} s per notebook)"))
    found.append(_process_limit())
    found.append(_kernel(box.kernel_name))
    if course is not None:
        found.append(_exchange(course))
        found.append(_gradebook(course))
    return found


def _process_limit():
    from grader.sandbox import process_count

    if os.geteuid() == 0:
        return (None, "process limit", "per sandbox: each concurrent sandbox runs under a uid of its own")
    if process_count.counted_per_namespace():
        return (None, "process limit", "per sandbox: this kernel counts processes per user namespace")
    return (None, "process limit", "shared: this kernel counts all of this user's processes against "
                                   "each sandbox's limit, so it is raised by their number (grade as root "
                                   "for a limit per sandbox)")


def _kernel(name):
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        return (False, "kernel", f"kernelspec {name!r} is not installed "
                                 f"(python -m ipykernel install --user --name {name})")
    note = ""
    if spec.argv and os.path.realpath(spec.argv[0]) != os.path.realpath(sys.executable) \
            and spec.argv[0] not in ("python", "python3"):
        note = f"; note: it names {spec.argv[0]}, grading uses {sys.executable}"
    return (True, "kernel", f"{name!r} present ({spec.display_name}){note}")


def _exchange(course):
    root = Path(course.exchange_root)
    if not root.is_dir():
        return (False, "exchange", f"{root} does not exist (`grader init` creates it)")
    mode = stat.S_IMODE(root.stat().st_mode)
    inbound = root / course.course_id / "inbound"
    detail = f"{root} mode {mode:o}"
    if inbound.is_dir():
        detail += f", inbound mode {stat.S_IMODE(inbound.stat().st_mode):o}"
    ok = mode & 0o777 == 0o777 and os.access(root, os.W_OK)
    return (ok, "exchange", detail + ("" if ok else " (students need it world-writable: 777)"))


def _gradebook(course):
    try:
        with course.gradebook() as gb:
            return (True, "gradebook", f"{course.db_url_shown}: {len(gb.assignments)} assignments, "
                                       f"{len(gb.students)} students")
    except Exception as err:  # noqa: BLE001 - any database error is the answer here
        return (False, "gradebook", f"{course.db_url_shown}: {err}")
