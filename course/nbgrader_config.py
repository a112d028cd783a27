"""nbgrader configuration of the course.

Run nbgrader from this folder (``cd course``): assignment sources live in
``assignments/<id>/<id>.ipynb``; ``release/``, ``submitted/``, ``autograded/``,
``feedback/`` and ``gradebook.db`` are created next to them and never committed.
"""
import os
import sys

c = get_config()  # noqa: F821 (provided by traitlets when it runs this file)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbgrader.preprocessors import (  # noqa: E402
    CheckCellMetadata, ClearHiddenTests, ClearMarkScheme, ClearOutput, ComputeChecksums,
    IncludeHeaderFooter, InstantiateTests, LockCells, SaveCells,
)
from nbgrader_task_stubs import TaskClearSolutions  # noqa: E402

c.CourseDirectory.course_id = "dlsys"
c.CourseDirectory.source_directory = "assignments"

# The default pipeline with the task-aware stubs in place of ClearSolutions.
c.GenerateAssignment.preprocessors = [
    IncludeHeaderFooter, InstantiateTests, LockCells, TaskClearSolutions, ClearOutput,
    CheckCellMetadata, ComputeChecksums, SaveCells, ClearHiddenTests, ClearMarkScheme,
    ComputeChecksums, CheckCellMetadata,
]
# Solutions the student never touched should fail loudly, naming the task.
c.ClearSolutions.code_stub = {"python": '# YOUR CODE HERE\nraise NotImplementedError("not implemented yet")'}

# Cython cells compile in a few seconds; a training cell may take a minute on a laptop.
c.Execute.timeout = 600
c.Execute.kernel_name = "python3"
