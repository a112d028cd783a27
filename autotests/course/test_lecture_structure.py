"""Every lecture follows the course's pattern, so a student knows where to look in each one.

A title and its goals first; the math in Markdown; code that uses numpy and then
``needle_kernels``; at least one picture; ungraded exercises; a summary at the end.
These are static checks of the committed notebooks (``test_lectures.py`` executes them).
"""
import re

import nbformat
import pytest

from nbhelpers import lecture_notebooks

GOALS = re.compile(r"^\*\*(Learning goals|Goals)\*\*", re.M)
MATH = re.compile(r"\$[^$\n]+\$")
FIGURE = re.compile(r"\bplt\.|\bgraph_text\(|\bgraph_dot\(|display\(")


def _sections(nb):
    return [line[3:].strip() for cell in nb.cells if cell.cell_type == "markdown"
            for line in cell.source.splitlines() if line.startswith("## ")]


@pytest.mark.parametrize("path", lecture_notebooks(), ids=lambda p: p.stem)
def test_lecture_follows_the_course_pattern(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), "the first cell is the title"
    assert GOALS.search(first.source), "the title cell states the learning goals (**Learning goals**)"
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert len(MATH.findall(markdown)) >= 5, "the math is written out in Markdown"
    assert "import numpy as np" in code and "needle_kernels" in code, "numpy first, then needle_kernels"
    assert FIGURE.search(code), "at least one picture (a plot or a drawn graph)"
    sections = _sections(nb)
    assert any(s.startswith("Exercises") for s in sections), "a section of ungraded exercises"
    assert sections and sections[-1].startswith("Summary"), f"the last section is the summary, not {sections[-1:]}"
