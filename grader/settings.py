"""The course options that nbgrader does not have, read from `nbgrader_config.py`.

They are traitlets sections like nbgrader's own, so one config file holds both:
`c.Sandbox.memory_mb = 2048` sits beside `c.Execute.timeout = 60`.
"""

from traitlets import Bool, Dict, Enum, Float, Integer, List, Unicode
from traitlets.config import Configurable


class Sandbox(Configurable):
    """How a submission is executed: isolation and resource limits."""

    mode = Enum(
        ["auto", "bwrap", "unshare", "none"], "auto",
        help="'auto' uses bubblewrap, else unshare; 'none' runs student code unconfined "
             "and must be chosen explicitly.",
    ).tag(config=True)
    kernel_name = Unicode(
        "python3",
        help="The kernelspec every submission is graded with, whatever its metadata says.",
    ).tag(config=True)
    memory_mb = Integer(1536, help="Address-space limit of the kernel (RLIMIT_AS).").tag(config=True)
    max_processes = Integer(64, help="Processes and threads the kernel may own (RLIMIT_NPROC).").tag(config=True)
    max_file_mb = Integer(64, help="Largest file the kernel may write (RLIMIT_FSIZE).").tag(config=True)
    max_open_files = Integer(256, help="Open file descriptors of the kernel (RLIMIT_NOFILE).").tag(config=True)
    tmp_mb = Integer(256, help="Size of the private /tmp and home inside the sandbox.").tag(config=True)
    notebook_budget = Integer(
        600, help="Wall-clock seconds for a whole notebook; cells left when it runs out score 0.",
    ).tag(config=True)
    startup_timeout = Integer(60, help="Seconds for the sandboxed kernel to start.").tag(config=True)
    uid_base = Integer(
        61000,
        help="When grading as root, worker slot k runs as uid uid_base+k, so the process "
             "limit counts that sandbox alone (root itself is exempt from RLIMIT_NPROC).",
    ).tag(config=True)
    packages = List(
        Unicode(), [],
        help="Importable packages that live outside the interpreter's prefix (editable "
             "installs) and that submissions may import; exposed read-only.",
    ).tag(config=True)
    readonly_paths = List(Unicode(), [], help="Extra host paths exposed read-only.").tag(config=True)
    hidden_paths = List(
        Unicode(), [],
        help="Extra host paths to hide in 'unshare' mode (bubblewrap shows only what it binds).",
    ).tag(config=True)


class LatePolicy(Configurable):
    """When a submission counts as late and what it costs."""

    grace_minutes = Float(0.0, help="Submissions this late are not penalised.").tag(config=True)
    penalty = Enum(
        ["zero", "none", "decay", "late_days"], "zero",
        help="'zero': a late notebook scores 0; 'none': only reported; 'decay': decay_per_day of "
             "the score is lost for each day or part of a day late; 'late_days': the student's "
             "late days (late_day_budget for the term) cover whole days first, then decay.",
    ).tag(config=True)
    decay_per_day = Float(
        0.1, help="Share of the score lost per day late under 'decay' and 'late_days' (1.0: zero).",
    ).tag(config=True)
    late_day_budget = Integer(
        0, help="Late days each student may spend across the term under 'late_days', "
                "in the order of the assignments' due dates.",
    ).tag(config=True)
    clock_tolerance_seconds = Integer(
        120,
        help="A timestamp.txt earlier than the arrival of the submission by more than this is "
             "treated as forged, and the arrival time is used instead.",
    ).tag(config=True)


class SolutionRelease(Configurable):
    late_window_hours = Float(
        0.0, help="Solutions are released only this long after the due date (unless forced).",
    ).tag(config=True)
    suffix = Unicode("-solution", help="Exchange name of the solutions of ASSIGNMENT.").tag(config=True)


class FeedbackPolicy(Configurable):
    reveal_hidden_tests = Bool(
        False, help="Show the source of hidden tests in feedback (off: only their result).",
    ).tag(config=True)


class LmsExport(Configurable):
    """What the learning management systems need beyond the gradebook."""

    canvas_assignment_ids = Dict(
        value_trait=Integer(), default_value={},
        help="Canvas's id of each assignment ({'hw1': 12345}): the column is then 'hw1 (12345)', "
             "which Canvas matches to that assignment instead of creating a new one.",
    ).tag(config=True)


class CommentBank(Configurable):
    """Comments written once and put on answers while grading by hand (`grader comment`)."""

    comments = Dict(
        value_trait=Unicode(), default_value={},
        help="Reusable comments by short name ({'units': 'Say which units each quantity is in.'}); "
             "`grader comment ASSIGNMENT STUDENT CELL NAME...` adds them to the answer's comment, "
             "which the formgrader shows.",
    ).tag(config=True)
