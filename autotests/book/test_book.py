"""The course book (``book/build.py``), built on a few lectures and one assignment, read in Chromium.

The build executes the lectures through myst-nb (sharing ``book/build/jupyter_cache`` with
``make book``, so an unchanged lecture is not executed twice) and writes a static site, served here
from 127.0.0.1. Debian's Chromium, driven by Playwright as in the hub's tests, then opens every
page and checks that

* each loads with no missing asset (no response of 400 or more, no failed request) and asks for
  nothing outside the site (the book reads offline), and each link between pages has a target;
* a lecture page shows its figures (each ``img`` loaded) and its math rendered by MathJax;
* the search page finds, for a word that only one of the lectures uses, that lecture;
* every numbered exercise of every lecture's ungraded exercises has its solution under it, in a
  ``:::{dropdown} Solution`` block, and a built lecture page shows each as a closed dropdown (the
  student opens it after trying);
* no file of the site holds ``BEGIN SOLUTION``, ``BEGIN HIDDEN TESTS``, or any line of 40 characters
  or more from a ``### BEGIN SOLUTION`` region of an assignment (the graded solutions), other than the
  few idioms every text on the subject shares (``IDIOMS``).

With ``BOOK_SCREENSHOTS=folder`` it also saves the screenshots of a lecture page and of the search
results that the README shows (``book/screenshots/``).
"""
import functools
import html
import importlib.util
import http.server
import os
import re
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("book_build", REPO / "book" / "build.py")
book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(book)

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# fast lectures with figures and math; the assignment page is written from hw1's Markdown
LECTURES = ["03", "04", "05"]
ASSIGNMENT = "hw1"
FIGURE_LECTURE = "lectures/04_automatic_differentiation.html"
MIN_SOLUTION_LINE = 40
# lines of 40 characters or more that solutions share with every text on the subject: not a solution
IDIOMS = {
    "int i = blockIdx.x * blockDim.x + threadIdx.x;",  # a CUDA thread's global index, as lecture 12 teaches it
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("myst_nb", reason="the book's tools are not installed (pip install -e '.[book]')")
    out = tmp_path_factory.mktemp("book")
    html_dir, seconds = book.build(out, LECTURES, [ASSIGNMENT], api=True, quiet=True)
    print(f"book of {LECTURES} + {ASSIGNMENT} + API built in {seconds:.0f} s")
    return html_dir


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(Quiet, directory=str(site))
    httpd = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a browser that navigates away mid-response breaks the pipe: not the site's fault


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api",
                                         reason="Playwright is not installed (pip install -e '.[hub]')")
    if not os.path.exists(CHROMIUM):
        pytest.skip("Chromium is not installed: sudo apt-get install chromium "
                    "(scripts/install_system_deps.sh does it on Debian/Ubuntu)")
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


def pages(site):
    """The site's pages (the theme's ``_static/*.html`` are template fragments, not pages)."""
    return sorted(rel for rel in (p.relative_to(site).as_posix() for p in site.rglob("*.html"))
                  if not rel.startswith(("_static/", "_sources/")))


def open_page(browser, url, idle=True):
    """(page, problems): ``url`` loaded (and, with ``idle``, what its scripts fetch after loading,
    MathJax's fonts say), with every missing asset and every request that leaves 127.0.0.1 listed
    in ``problems``."""
    page = browser.new_page()
    problems = []
    host = urlparse(url).netloc

    def route(r):
        if urlparse(r.request.url).scheme in ("http", "https") and urlparse(r.request.url).netloc != host:
            problems.append(f"asks the network for {r.request.url}")
            return r.abort()
        return r.continue_()

    page.route("**/*", route)
    page.on("response", lambda resp: resp.status >= 400 and problems.append(f"{resp.status} {resp.url}"))
    page.on("requestfailed", lambda req: "asks the network" not in " ".join(problems[-1:])
            and problems.append(f"failed {req.url}: {req.failure}"))
    page.goto(url, wait_until="load")
    if idle:
        page.wait_for_load_state("networkidle")
    return page, problems


def test_every_page_loads_with_all_its_assets(site, server, browser):
    found = pages(site)
    assert f"lectures/{Path(FIGURE_LECTURE).name}" in found and f"assignments/{ASSIGNMENT}.html" in found
    assert "api.html" in found and any(p.startswith("generated/needle_kernels.autograd") for p in found)
    broken = {}
    for rel in found:
        # the API pages have no math or figures: their assets are all loaded at "load"
        page, problems = open_page(browser, server + rel, idle=not rel.startswith("generated/"))
        page.close()
        if problems:
            broken[rel] = problems
    assert not broken, "pages with missing assets:\n" + "\n".join(f"  {k}: {v}" for k, v in broken.items())


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img", "link", "script"):
                self.targets.append(attrs[key])


def test_links_between_pages_have_targets(site):
    missing = []
    for rel in pages(site):
        parser = Links()
        parser.feed((site / rel).read_text(encoding="utf-8"))
        for target in parser.targets:
            url = urlparse(target)
            if url.scheme or url.netloc or not url.path:
                continue
            path = (site / rel).parent / unquote(url.path)
            if not path.exists():
                missing.append(f"{rel} -> {target}")
    assert not missing, "links to nothing:\n" + "\n".join(missing[:40])


def test_a_lecture_page_shows_its_figures_and_math(site, server, browser, tmp_path):
    page, problems = open_page(browser, server + FIGURE_LECTURE)
    assert not problems, problems
    figures = page.locator(".cell_output img")
    assert figures.count() >= 3, f"{FIGURE_LECTURE} shows {figures.count()} figures"
    unloaded = page.evaluate("""() => [...document.querySelectorAll('.cell_output img')]
        .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.src)""")
    assert not unloaded, f"figures that did not load: {unloaded}"
    page.wait_for_selector("mjx-container", state="attached", timeout=30_000)
    rendered = page.locator("mjx-container").count()
    assert rendered >= 5, f"MathJax rendered {rendered} formulas"
    assert page.locator(".math:not(:has(mjx-container))").count() == 0, "math left as TeX source"
    shots = os.environ.get("BOOK_SCREENSHOTS")
    if shots:
        page.set_viewport_size({"width": 1280, "height": 900})
        page.evaluate("document.querySelectorAll('.cell_output img')[1].scrollIntoView({block: 'center'})")
        page.wait_for_timeout(500)
        page.screenshot(path=str(Path(shots) / "lecture-page.png"))
    page.close()


def words_of_lecture(stem):
    nb = nbformat.read(book.LECTURES / f"{stem}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return set(re.findall(r"\b[a-z]{9,}\b", text))


def test_search_finds_a_term_of_one_lecture(site, server, browser):
    stems = [p.stem for p in book.lecture_paths(LECTURES)]
    target = "04_automatic_differentiation"
    others = set().union(*(words_of_lecture(s) for s in stems if s != target))
    other_pages = " ".join((site / p).read_text(encoding="utf-8").lower()
                           for p in pages(site) if not p.startswith(f"lectures/{target}"))
    # a word this lecture writes and no other page of the site contains
    term = next(w for w in sorted(words_of_lecture(target) - others) if w not in other_pages)
    page, problems = open_page(browser, server + f"search.html?q={term}")
    page.wait_for_selector("#search-results li", timeout=30_000)
    hits = page.eval_on_selector_all("#search-results li a", "els => els.map(e => e.getAttribute('href'))")
    assert any(target in h for h in hits), f"searching {term!r} found {hits}"
    assert not problems, problems
    shots = os.environ.get("BOOK_SCREENSHOTS")
    if shots:
        page.goto(server + "search.html?q=topological+sort")
        page.wait_for_selector("#search-results li", timeout=30_000)
        page.wait_for_timeout(1500)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.screenshot(path=str(Path(shots) / "search-results.png"))
    page.close()


class Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def normalised(text):
    return re.sub(r"\s+", " ", text).strip()


def solution_lines():
    """Every line of 40 characters or more inside an assignment's ``### BEGIN SOLUTION`` regions."""
    lines = set()
    for aid in book.assignment_ids():
        nb = nbformat.read(book.ASSIGNMENTS / aid / f"{aid}.ipynb", as_version=4)
        for cell in nb.cells:
            inside = False
            for line in cell.source.splitlines():
                if "### BEGIN SOLUTION" in line:
                    inside = True
                elif "### END SOLUTION" in line:
                    inside = False
                elif inside and len(line.strip()) >= MIN_SOLUTION_LINE and normalised(line) not in IDIOMS:
                    lines.add(normalised(line))
    assert len(lines) > 50, "found no solution regions to compare with"
    return lines


def test_no_page_holds_a_solution_or_a_hidden_test(site):
    wanted = solution_lines()
    leaks = []
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        if path.suffix not in (".html", ".js", ".txt", ".ipynb", ".md", ".json"):
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".html":
            parser = Text()
            parser.feed(raw)
            raw = "".join(parser.parts)
        text = normalised(html.unescape(raw))
        rel = path.relative_to(site).as_posix()
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS"):
            if marker in text:
                leaks.append(f"{rel}: {marker}")
        leaks += [f"{rel}: {line}" for line in wanted if line in text]
    assert not leaks, "solutions in the book:\n" + "\n".join(leaks[:40])


def test_the_assignment_page_is_its_notebooks_description(site):
    page = Text()
    page.feed((site / "assignments" / f"{ASSIGNMENT}.html").read_text(encoding="utf-8"))
    text = normalised(html.unescape("".join(page.parts)))
    nb = nbformat.read(book.ASSIGNMENTS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    task_ids = set(re.findall(r"\b(hw1_t\d+)\b", nb.cells[0].source))
    assert task_ids and all(t in text for t in task_ids), "the page lists the assignment's tasks"
    # no code cell reaches the page: neither a solution nor a test (visible or hidden) nor a stub
    code_lines = {normalised(line) for cell in nb.cells if cell.cell_type == "code"
                  for line in cell.source.splitlines() if len(line.strip()) >= MIN_SOLUTION_LINE}
    copied = [line for line in code_lines if line in text]
    assert not copied, f"code of {ASSIGNMENT}.ipynb on its page: {copied[:5]}"


SOLUTION = ":::{dropdown} Solution"


def exercises(path):
    """The items of a lecture's numbered list under ``## Exercises``, each with the text up to the next item
    (its solution included)."""
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    head, _, rest = text.partition("\n## Exercises")
    assert rest, f"{path.stem}: no exercise section"
    section = rest.split("\n## ", 1)[0]
    return re.split(r"(?m)^\d+\. ", section)[1:]


def test_every_lecture_exercise_has_a_solution_to_open():
    missing, counted = [], 0
    for path in book.lecture_paths():
        items = exercises(path)
        assert items, f"{path.stem}: its exercise section has no numbered exercises"
        missing += [f"{path.stem}: exercise {i}" for i, item in enumerate(items, 1) if item.count(SOLUTION) != 1]
        counted += len(items)
    assert not missing, "exercises without exactly one solution dropdown:\n" + "\n".join(missing)
    assert counted > 100, f"found only {counted} exercises"


def test_a_lecture_page_shows_each_solution_as_a_closed_dropdown(site):
    for path in book.lecture_paths(LECTURES):
        page = (site / "lectures" / f"{path.stem}.html").read_text(encoding="utf-8")
        dropdowns = re.findall(r"<details\b[^>]*\bsd-dropdown\b[^>]*>", page)
        assert len(dropdowns) == len(exercises(path)), f"{path.stem}: {len(dropdowns)} dropdowns on its page"
        assert not [d for d in dropdowns if re.search(r"\sopen\b", d)], f"{path.stem}: a solution is shown open"
