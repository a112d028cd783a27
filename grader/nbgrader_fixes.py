"""Workarounds for nbgrader 0.9 behaviour that breaks grading, as preprocessors.

`DeduplicateIds` empties the `nbgrader` metadata of a duplicated cell, and with
`OverwriteCells.add_missing_cells` nbgrader then fails on that empty dict
(`KeyError: 'grade_id'`), so the whole submission goes ungraded. Removing the
empty dict makes the duplicate an ordinary cell, which is what was meant.
"""

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import List


class GraderPreprocessor(NbGraderPreprocessor):
    """Base of this package's preprocessors.

    It accepts `display_data_priority` from the config, as nbgrader's GetGrades does:
    nbconvert's HTML exporter sets it for every preprocessor, and NbGraderPreprocessor
    would report it as an unknown option.
    """

    display_data_priority = List(["text/html", "application/pdf", "text/latex", "image/svg+xml",
                                  "image/png", "image/jpeg", "text/plain"]).tag(config=True)


class DropEmptyNbgraderMetadata(GraderPreprocessor):
    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if "nbgrader" in cell.metadata and not cell.metadata["nbgrader"]:
                del cell.metadata["nbgrader"]
        return nb, resources
