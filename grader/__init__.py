"""Course grading on nbgrader 0.9: release, submit, sandboxed parallel autograding,
feedback without hidden-test source, solutions through the exchange, CSV export.

Everything here wraps nbgrader (its notebook format, gradebook, exchange and
preprocessors); the only step replaced is notebook execution, which runs each
submission in a sandbox with limits.
"""

__version__ = "0.1.0"


class GraderError(Exception):
    """A failure the user can act on; the CLI prints it and exits non-zero."""
