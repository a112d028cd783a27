"""A course directory: its `nbgrader_config.py`, loaded the way nbgrader loads it."""

import copy
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from grader import GraderError

CONFIG_FILE = "nbgrader_config.py"
DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"
# what the course's own assignments import: shown in the grading sandbox by default,
# where the grading interpreter can import them (an editable install lives outside the
# prefix, so without this the sandbox would not see it)
DEFAULT_PACKAGES = ("needle_kernels", "coursekit")

# The only change to nbgrader's autograde pipeline: `Execute` becomes the sandboxed
# step. Kept in the config file so `nbgrader autograde` and the formgrader use it too.
FEEDBACK_PREPROCESSORS = [
    "nbgrader.preprocessors.GetGrades", "grader.feedback.HideHiddenTests",
    "grader.feedback.ShowGradingNotes", "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]

SANITIZE_PREPROCESSORS = [
    "grader.submission_checks.NoteSubmissionChecks",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "grader.nbgrader_fixes.DropEmptyNbgraderMetadata",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]

AUTOGRADE_PREPROCESSORS = [
    "grader.sandbox.execute.SandboxedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

CONFIG_TEMPLATE = '''\
# Course configuration, read by `grader` and by nbgrader itself (CLI and formgrader).
c = get_config()  # noqa: F821

c.CourseDirectory.course_id = {course_id!r}
# Any SQLAlchemy URL works, e.g. "postgresql://grader@db/{course_id}" for a large course.
c.CourseDirectory.db_url = {db_url!r}
c.Exchange.root = {exchange!r}

# Every submission runs in a sandbox with this kernel, whatever its metadata says.
c.Sandbox.kernel_name = {kernel_name!r}
c.Sandbox.mode = "auto"            # bwrap, else unshare; "none" only if you mean it
# packages installed in development mode (outside the interpreter's prefix) that
# submissions import; they are shown read-only inside the sandbox
c.Sandbox.packages = {packages!r}
c.Sandbox.memory_mb = 1536
c.Sandbox.max_processes = 64
c.Sandbox.max_file_mb = 64
c.Sandbox.notebook_budget = 600    # seconds per notebook
c.Execute.timeout = 30             # seconds per cell
c.Autograde.sanitize_preprocessors = {sanitize!r}
c.Autograde.autograde_preprocessors = {preprocessors!r}
c.Autograde.exclude_overwriting = {{}}
# A deleted test cell is put back and run, so deleting a test never helps.
c.OverwriteCells.add_missing_cells = True

# Feedback shows hidden tests' results, not their source (c.FeedbackPolicy.reveal_hidden_tests).
c.GenerateFeedback.preprocessors = {feedback_preprocessors!r}

c.AssignLatePenalties.plugin_class = "grader.late.GraceLatePenalty"
c.LatePolicy.grace_minutes = 15
# "zero", "none", "decay" (decay_per_day per day late) or "late_days" (the term's
# late_day_budget covers whole days first, then decay); extensions: `grader extend`
c.LatePolicy.penalty = "zero"
c.LatePolicy.decay_per_day = 0.1
c.LatePolicy.late_day_budget = 0
c.SolutionRelease.late_window_hours = 0
c.FeedbackPolicy.reveal_hidden_tests = False
'''


@dataclass
class Course:
    """A loaded course: its root directory and its merged nbgrader config."""

    root: Path
    config: Config

    @property
    def course_id(self) -> str:
        return self.config.CourseDirectory.course_id

    @property
    def db_url(self) -> str:
        return self.config.CourseDirectory.db_url

    @property
    def db_url_shown(self) -> str:
        """The gradebook URL with its password, if any, masked: for messages and reports."""
        return shown_url(self.db_url)

    @property
    def exchange_root(self) -> str:
        return self.config.Exchange.get("root", DEFAULT_EXCHANGE)

    def section(self, cls):
        """An instance of a settings class (`grader.settings.Sandbox`, ...) from this config."""
        return cls(config=self.config)

    def merged(self, extra=None) -> Config:
        """This course's config with `extra` on top (the course's own object is left alone)."""
        config = copy.deepcopy(self.config)
        if extra is not None:
            config.merge(extra)
        return config

    def api(self, extra=None):
        """nbgrader's own in-process API, the one the formgrader uses."""
        from nbgrader.apps.api import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        config = self.merged(extra)
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir=coursedir, config=config)

    def gradebook(self):
        from nbgrader.api import Gradebook

        return Gradebook(self.db_url, self.course_id)

    def path(self, *parts) -> Path:
        return self.root.joinpath(*parts)


def load_course(root=None) -> Course:
    """Load the course whose `nbgrader_config.py` is in `root` (default: the current directory)."""
    root = Path(root or os.getcwd()).resolve()
    if not (root / CONFIG_FILE).exists():
        raise GraderError(
            f"{root} is not a course directory (no {CONFIG_FILE}); "
            "run `grader init DIR --course-id ID` or cd into the course")
    config = PyFileConfigLoader(CONFIG_FILE, path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    if not config.CourseDirectory.get("course_id"):
        raise GraderError(f"{root / CONFIG_FILE} sets no c.CourseDirectory.course_id")
    if not config.CourseDirectory.get("db_url"):
        config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    return Course(root=root, config=config)


def student_config(course_id: str, exchange=None, student=None, root=None) -> Config:
    """Config for the student commands, which run in the student's own directory."""
    c = Config()
    c.CourseDirectory.course_id = course_id
    c.CourseDirectory.root = str(Path(root or os.getcwd()).resolve())
    c.Exchange.root = str(exchange or os.environ.get("NBGRADER_EXCHANGE", DEFAULT_EXCHANGE))
    c.Exchange.assignment_dir = c.CourseDirectory.root
    if student:
        c.CourseDirectory.student_id = student
    return c


def ensure_exchange(path) -> None:
    """nbgrader's exchange root must exist and be writable by everyone (students drop
    submissions into it). 0777 or 1777 both do: with the sticky bit (what a shared
    exchange made by root has) nobody can remove or rename another's files. A root
    that is neither is made 0777 when this account owns it; otherwise its owner must."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o777 == 0o777:
        return
    try:
        path.chmod(0o777 | (mode & stat.S_ISVTX))
    except PermissionError:
        raise GraderError(f"the exchange {path} is mode {mode:04o}, so students cannot submit, and "
                          f"this account cannot change it: `chmod 1777 {path}` as its owner") from None


def shown_url(url: str) -> str:
    """`url` with its password replaced by ***, as SQLAlchemy prints URLs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: nothing to hide in it
        return url


def default_packages() -> list:
    """The packages of DEFAULT_PACKAGES that this interpreter can import."""
    import importlib.util

    return [name for name in DEFAULT_PACKAGES if importlib.util.find_spec(name) is not None]


def init_course(directory, course_id: str, exchange=None, kernel_name="python3", db_url=None,
                packages=None) -> Course:
    """Create a course directory with an nbgrader config, an empty gradebook and an exchange.

    `packages`, and `default_packages()` always, are shown read-only in the grading sandbox."""
    root = Path(directory).resolve()
    if (root / CONFIG_FILE).exists():
        raise GraderError(f"{root / CONFIG_FILE} already exists; not overwriting a course")
    if not course_id or any(ch in course_id for ch in "+*/ "):
        raise GraderError(f"invalid course id {course_id!r} (no spaces, '+', '*' or '/')")
    exchange = str(Path(exchange or DEFAULT_EXCHANGE).resolve())
    try:
        ensure_exchange(exchange)
    except PermissionError as err:
        raise GraderError(f"cannot create the exchange {exchange}: {err}; pass --exchange PATH") from None
    for sub in ("source", "release", "submitted", "autograded", "feedback"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    (root / CONFIG_FILE).write_text(CONFIG_TEMPLATE.format(
        course_id=course_id, db_url=db_url, exchange=exchange, kernel_name=kernel_name,
        packages=list(dict.fromkeys(default_packages() + list(packages or ()))),
        preprocessors=AUTOGRADE_PREPROCESSORS, sanitize=SANITIZE_PREPROCESSORS, feedback_preprocessors=FEEDBACK_PREPROCESSORS))
    course = load_course(root)
    try:
        with course.gradebook():
            pass  # creates the gradebook schema
    except Exception as err:  # noqa: BLE001 - a missing driver, a database server out of reach
        # without a config left behind, `grader init` can be run again once that is fixed
        (root / CONFIG_FILE).unlink()
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise GraderError(f"cannot open the gradebook {shown_url(db_url)}: {reason}") from None
    return course
