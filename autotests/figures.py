"""Figures a test measures (grading times, ...), printed in the run's closing summary.

pytest hides what passing tests print, and xdist workers print nowhere, so tests append
their figures to one file named in the environment, which the workers inherit; the
controller prints it at the end (the hooks are imported by ``autotests/conftest.py``).
"""
import os
import pathlib
import tempfile

FIGURES_ENV = "AUTOTESTS_FIGURES_FILE"


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        fd, path = tempfile.mkstemp(prefix="autotests-figures-", suffix=".txt")
        os.close(fd)
        os.environ[FIGURES_ENV] = path


def report_figure(line):
    """Print ``line`` in the run's closing summary (from any worker)."""
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(line.rstrip("\n") + "\n")


def pytest_terminal_summary(terminalreporter):
    path = os.environ.get(FIGURES_ENV)
    if not path or not os.path.exists(path) or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    lines = pathlib.Path(path).read_text().splitlines()
    os.unlink(path)
    if lines:
        terminalreporter.section("measured")
        for line in lines:
            terminalreporter.write_line(line)
