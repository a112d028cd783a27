"""Solution stubs that name the task a student is working on.

nbgrader replaces every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region
with one fixed stub per language. In this course every graded part has a task
id (``hw1_t3``) that appears in its heading, its grade ids and the error the
student sees before they have written anything, so the stub is built per cell
from the cell's ``grade_id`` (``hw1_t3_power_scalar`` -> ``hw1_t3``).
"""
import re

from nbgrader.preprocessors import ClearSolutions
from traitlets import Unicode

TASK_ID = re.compile(r"^(?P<task>[A-Za-z0-9]+_t\d+)(?:_|$)")


def task_id_of(grade_id):
    """The task id a grade id starts with (``hw2_t4_tests`` -> ``hw2_t4``), or None."""
    m = TASK_ID.match(grade_id or "")
    return m.group("task") if m else None


class TaskClearSolutions(ClearSolutions):
    """ClearSolutions whose Python stub raises ``NotImplementedError`` naming the task id."""

    task_code_stub = Unicode(
        '# YOUR CODE HERE ({task})\nraise NotImplementedError("{task}: not implemented yet")',
        help="Python stub for a solution region of a cell whose grade_id starts with a task id; "
        "'{task}' is replaced by that id.",
    ).tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        task = task_id_of(grade_id)
        language = resources.get("language", "python")
        if task is None or language != "python":
            return super().preprocess_cell(cell, resources, cell_index)
        saved = self.code_stub
        self.code_stub = dict(saved, python=self.task_code_stub.format(task=task))
        try:
            return super().preprocess_cell(cell, resources, cell_index)
        finally:
            self.code_stub = saved
