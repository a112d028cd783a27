"""Build the course book: a static HTML site of the executed lectures, the assignments and the API.

    python book/build.py                                  # the whole course into book/build/html
    python book/build.py --lectures 04 05 --assignments hw1 --out /tmp/book

The sources are laid out under ``OUT/src``: the lecture notebooks (as committed, without outputs),
a page per assignment written from its notebook's Markdown (the cells students read before they
write code: no solution cell, no test cell), the API reference (autosummary of ``needle_kernels``)
and an index whose table of contents lists the lectures in order. Sphinx (``book/conf.py``) then
executes the notebooks through myst-nb's jupyter-cache (``--cache``, ``book/build/jupyter_cache``
by default): a notebook whose code is unchanged since a build that used the same cache is read from
it, not executed again. MathJax comes from the ``django-static-mathjax`` wheel and is copied into
the site, so the pages load nothing from the network.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

BOOK = Path(__file__).resolve().parent
REPO = BOOK.parent
LECTURES = REPO / "course" / "lectures"
ASSIGNMENTS = REPO / "course" / "assignments"
# a solution or hidden test never reaches a page, whatever cell it sits in
WITHHELD = re.compile(r"BEGIN SOLUTION|END SOLUTION|BEGIN HIDDEN TESTS|END HIDDEN TESTS")
# what MathJax's CommonHTML output loads after tex-chtml.js (fonts, extensions, menu, a11y)
MATHJAX_PARTS = ["tex-chtml.js", "input", "output/chtml", "a11y", "ui", "adaptors"]


def lecture_paths(selected=None):
    """The lecture notebooks in course order (numbered lectures, then the lab); ``selected`` keeps
    those whose name starts with one of its entries (``"04"``, ``"lab"``)."""
    paths = sorted(LECTURES.glob("*.ipynb"), key=lambda p: (not p.name[:2].isdigit(), p.name))
    if selected:
        paths = [p for p in paths if any(p.stem.startswith(s) for s in selected)]
        missing = [s for s in selected if not any(p.stem.startswith(s) for p in paths)]
        if missing:
            raise SystemExit(f"no lecture notebook starts with {missing}")
    return paths


def assignment_ids(selected=None):
    ids = sorted(p.name for p in ASSIGNMENTS.iterdir() if (p / f"{p.name}.ipynb").is_file())
    if selected:
        missing = sorted(set(selected) - set(ids))
        if missing:
            raise SystemExit(f"no assignment {missing}")
        ids = [i for i in ids if i in selected]
    return ids


def assignment_page(aid):
    """The Markdown of assignment ``aid``'s page: its notebook's Markdown cells that are neither
    solution nor grading cells, in order."""
    nb = nbformat.read(ASSIGNMENTS / aid / f"{aid}.ipynb", as_version=4)
    parts = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "markdown" or meta.get("solution") or meta.get("grade") or meta.get("task"):
            continue
        if WITHHELD.search(cell.source):
            continue
        parts.append(cell.source.strip())
    if not parts or not parts[0].startswith("# "):
        raise SystemExit(f"{aid}: its notebook does not open with a title cell")
    note = (f"*This page describes the assignment; the notebook `{aid}.ipynb`, with the code cells "
            "you complete and the tests that grade them, is handed out through nbgrader.*")
    title, _, rest = parts[0].partition("\n")
    return "\n\n".join([title, note, rest.strip(), *parts[1:]]) + "\n"


def index_page(lectures, assignments, api):
    intro = (BOOK / "intro.md").read_text()
    toc = ["", "```{toctree}", ":caption: Lectures", ":maxdepth: 1", "",
           *[f"lectures/{p.stem}" for p in lectures], "```"]
    if assignments:
        toc += ["", "```{toctree}", ":caption: Assignments", ":maxdepth: 1", "",
                *[f"assignments/{a}" for a in assignments], "```"]
    if api:
        toc += ["", "```{toctree}", ":caption: Reference", ":maxdepth: 1", "", "api", "```"]
    return intro + "\n".join(toc) + "\n"


def stage(out, lectures, assignments, api):
    """Write the book's sources under ``out/src`` and MathJax under ``out/static``."""
    src = out / "src"
    if src.exists():
        shutil.rmtree(src)
    (src / "lectures").mkdir(parents=True)
    for p in lectures:
        shutil.copy(p, src / "lectures" / p.name)
    if assignments:
        (src / "assignments").mkdir()
        for aid in assignments:
            (src / "assignments" / f"{aid}.md").write_text(assignment_page(aid))
    if api:
        shutil.copy(BOOK / "api.md", src / "api.md")
    (src / "index.md").write_text(index_page(lectures, assignments, api))

    import mathjax  # the django-static-mathjax wheel: MathJax 3's es5 build as plain files

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    dest = out / "static" / "mathjax"
    if not (dest / "tex-chtml.js").is_file():
        for part in MATHJAX_PARTS:
            if (es5 / part).is_dir():
                shutil.copytree(es5 / part, dest / part, dirs_exist_ok=True)
            else:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy(es5 / part, dest / part)
    return src


def kernel_environment(out, cache):
    """The environment Sphinx runs in, inherited by the notebooks' kernels (as in the lecture tests:
    the working tree importable, inline figures)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "course")]
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env["BOOK_CACHE"] = str(cache)
    env["BOOK_STATIC"] = str(out / "static")
    return env


def build(out, lectures=None, assignments=None, api=True, cache=None, jobs=1, quiet=False):
    """Build the book into ``out/html``; returns (html folder, seconds)."""
    out = Path(out).resolve()
    cache = Path(cache or BOOK / "build" / "jupyter_cache").resolve()
    src = stage(out, lecture_paths(lectures), assignment_ids(assignments), api)
    html = out / "html"
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(BOOK), "-j", str(jobs),
           "-d", str(out / "doctrees"), str(src), str(html)]
    if quiet:
        cmd.append("-q")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=kernel_environment(out, cache), cwd=REPO)
    return html, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(BOOK / "build"), help="output folder (the site goes to OUT/html)")
    ap.add_argument("--lectures", nargs="*", help="lecture name prefixes (default: all)")
    ap.add_argument("--assignments", nargs="*", help="assignment ids (default: all)")
    ap.add_argument("--no-api", action="store_true", help="leave the API reference out")
    ap.add_argument("--cache", help="jupyter-cache folder (default: book/build/jupyter_cache)")
    ap.add_argument("-j", "--jobs", default="1", help="Sphinx processes (notebooks executed in parallel)")
    args = ap.parse_args(argv)
    html, seconds = build(args.out, args.lectures, args.assignments, not args.no_api, args.cache, args.jobs)
    print(f"book built in {seconds:.0f} s: {html / 'index.html'}")


if __name__ == "__main__":
    main()
