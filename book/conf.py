"""Sphinx configuration of the course book (``make book``, or ``python book/build.py``).

``book/build.py`` lays out the sources (the lecture notebooks, a page per assignment, the API
reference) in a folder of its own and runs Sphinx on it with this file; the notebooks are executed
by myst-nb through its jupyter-cache, so a notebook whose code did not change is not executed again.
"""
import os
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
REPO = BOOK.parent
# autodoc imports the working tree's package, as the notebooks' kernels do
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "course"))

project = "Deep Learning Systems with needle_kernels"
author = "the needle_kernels course"
copyright = "the needle_kernels course"

extensions = [
    "myst_nb",
    "sphinx_design",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
templates_path = [str(BOOK / "_templates")]
exclude_patterns = ["**/.ipynb_checkpoints", "jupyter_execute"]

# --- notebooks: executed through jupyter-cache, failures stop the build
nb_execution_mode = os.environ.get("BOOK_EXECUTE", "cache")
nb_execution_cache_path = os.environ.get("BOOK_CACHE", str(BOOK / "build" / "jupyter_cache"))
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]

# --- the API reference
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_mock_imports = ["cupy", "mpi4py", "onnx", "onnxruntime"]
napoleon_google_docstring = True
napoleon_numpy_docstring = True

# --- HTML: everything the pages load is in the site itself (no CDN), so it reads offline
html_theme = "sphinx_book_theme"
html_title = "Deep Learning Systems"
html_static_path = [os.environ.get("BOOK_STATIC", str(BOOK / "build" / "static"))]
mathjax_path = "mathjax/tex-chtml.js"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "navigation_with_keys": False,
}
html_last_updated_fmt = None
# the download button of a lecture page offers its notebook (as committed, without outputs)
html_copy_source = True
