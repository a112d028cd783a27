"""Course grading on nbgrader 0.9: release, submit, sandboxed parallel autograding,
feedback without hidden-test source, solutions through the exchange, CSV export.

Everything here wraps nbgrader (its notebook format, gradebook, exchange and
preprocessors); the only step replaced is notebook execution, which runs each
submission in a sandbox with limits.
"""

import sys

__version__ = "0.1.0"

# jsonschema checks the "iri" formats with rfc3987_syntax where it is installed, and that module
# compiles a grammar when imported: about a second added to every command that reads a notebook.
# No schema that nbformat or nbgrader validates uses those formats; without the module jsonschema
# leaves them unchecked.
sys.modules.setdefault("rfc3987_syntax", None)


class GraderError(Exception):
    """A failure the user can act on; the CLI prints it and exits non-zero."""
