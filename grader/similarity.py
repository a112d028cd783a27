"""`grader similarity ASSIGNMENT`: solutions that are the package's code, a lecture's, or another student's.

Copies are found the way MOSS finds them, with copydetect's pieces: each piece of code is
tokenised by pygments and filtered (``copydetect.utils.filter_code``: every identifier becomes
``V``, every function name ``F``, every string ``S``, comments and layout go), the k-grams of the
filtered text are hashed and winnowed (``copydetect.utils.winnow``), and two pieces overlap where
their fingerprints meet (``find_fingerprint_overlap``, ``get_copied_slices``,
``get_token_coverage``). Renaming variables, reordering statements, adding dead code or splitting
an expression into temporaries each break only the k-grams at the places they touch, so a
near-copy keeps most of its fingerprints; an independent solution shares idioms, not runs.

The unit of comparison is a top-level definition of a solution cell (``def``, ``class``, and
Cython's ``cdef``/``cpdef`` in ``%%cython`` cells; what a cell runs outside its definitions is one
more unit; each CUDA kernel of a cupy source string is one more). Its overlap with a reference is
the share of its own code (below) covered by fingerprints the reference also has, and a unit is
noted when that share reaches ``THRESHOLD`` (``KERNEL_THRESHOLD`` for Cython and CUDA, whose
index loops every solution shares) for one of

* the package: every definition of every module of the package's source tree, methods on their
  own as well, every top-level block of its C and CUDA sources and every kernel of its cupy
  sources, not only the part the assignment declares (a helper pasted under another name is
  still the package's);
* the lectures: every code cell of ``course/lectures/*.ipynb`` next to the grader, and every
  kernel in them;
* every other submission of the assignment. A unit that more than a tenth of the class (and more
  than two students) share is a common solution, not a copy, and is only counted.

Own code is what the student added. The fingerprints of every code cell of the release notebook
(the scaffolding, skeletons and stubs every student receives) and of the code its text spells out
(``self.attn = nn.AttentionLayer(...)``, which every student following the text writes) are
copydetect's *boilerplate*, and
so are the k-grams found in more than ``IDIOM`` of the package's definitions (the idioms any
solution in this library writes); both are removed before comparing. A unit with fewer than
``MIN_OWN`` filtered characters of own code is too small to say anything (``return a / b`` is
everybody's code).

``K``, ``WINDOW``, ``IDIOM`` and the thresholds were chosen on solutions written for the purpose
(``autotests/grader/fixtures``): the thresholds lie above every overlap among independent
solutions, the package, the lectures and the instructor's solution, and below the overlap of the
near-copies; ``python autotests/grader/test_similarity.py`` prints the figures.

What copydetect does not do, and why this module does it. It compares whole files, so splitting
notebooks into definitions, the inverted index that keeps a class of 30 against the whole package
to seconds, and the share of one unit are here. Its filter turns every string into ``S``, which
would hide the CUDA kernels that cupy compiles from Python strings, so a string that reads like C
is filtered again with the CUDA lexer and added. Its k-gram hash is Python's ``hash``, salted per
process, which would make a re-run pick other fingerprints and report other percentages, so the
k-grams are hashed with CRC-32 here (``get_document_fingerprints`` is replaced for that reason).
Pygments is most of the time, so the filtered texts of the package and the lectures are kept
under the course's ``.grader/similarity/`` for the next run.

Solution cells are also read for constructs that reach the grading kit or the interpreter's
machinery (``grader.suspicious``).

Findings are private notes for the instructor: no score changes, and feedback never shows
them; `grader export` has them in its `instructor_notes` column.
"""

import atexit
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import zlib

import nbformat
import numpy as np

# copydetect imports matplotlib for its reports, which writes a font cache into the grader's
# home; the grader draws nothing, so that cache goes to a folder of this process
if "MPLCONFIGDIR" not in os.environ:
    os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="grader-matplotlib-")
    atexit.register(shutil.rmtree, os.environ["MPLCONFIGDIR"], True)
from copydetect.utils import filter_code, find_fingerprint_overlap, get_copied_slices, get_token_coverage, winnow  # noqa: E402

from grader import notes
from grader.state import CourseState, write_atomic
from grader.suspicious import imported_names, suspicious_constructs

# k-gram length and winnowing window in filtered characters: any common run of
# K + WINDOW - 1 characters (about a short statement) is certain to be seen
K = 12
WINDOW = 4
THRESHOLD = 0.67          # share of a unit's own code found in one reference
KERNEL_THRESHOLD = 0.83   # the same for Cython and CUDA
IDIOM = 3                 # a k-gram in more of the package's definitions is an idiom, not evidence
MIN_OWN = 120             # filtered characters of own code below which a unit is not judged
DEFINITION = ("def", "class", "cdef", "cpdef", "async")
TOP_LEVEL = "(top level)"
C_LIKE = re.compile(r"__global__|__device__|#include|#define|\bfor\s*\(int\b")
STRING = re.compile(r'(?s)r?("""|\'\'\')(.*?)\1')
PACKAGE_SOURCES = ("*.py", "*.pyx", "*.pxi", "*.cu", "*.cuh", "*.c", "*.h", "*.cc", "*.cpp")


@dataclass
class Report:
    assignment: str
    package: list = field(default_factory=list)     # (student, cell, name, package unit, percent)
    lectures: list = field(default_factory=list)    # (student, cell, name, lecture cell, percent)
    shared: list = field(default_factory=list)      # (cell, name, [students], percent)
    common: int = 0                                 # units left out as common solutions
    suspicious: list = field(default_factory=list)  # (student, cell, what)


# ---- fingerprints -----------------------------------------------------------------------------

@dataclass
class Fingerprint:
    hashes: set
    index: dict
    own: float          # filtered characters covered by the unit's own (non-boilerplate) fingerprints
    kgrams: np.ndarray = None   # every k-gram hash of the unit, for counting idioms
    kernel: bool = False        # Cython or CUDA: loops over indices that every solution shares


def _strip_magics(source):
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def language_of(source):
    """``cython`` for a ``%%cython`` cell, else ``python``."""
    return "cython" if source.lstrip().startswith("%%cython") else "python"


_FILTERED = {}      # sha-1 of (language, code) -> filtered text; pygments is most of the time


def _key(code, language):
    return hashlib.sha1(f"{language}\0{code}".encode()).hexdigest()


def load_filter_cache(path):
    """Filtered texts saved by an earlier run (the package and the lectures rarely change)."""
    try:
        _FILTERED.update(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        pass


def save_filter_cache(path, keep):
    """Save the filtered texts of ``keep`` (keys) for the next run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({k: _FILTERED[k] for k in keep if k in _FILTERED}))


def filtered(code, language="python"):
    """The code as copydetect's filter leaves it, with C-like strings filtered as CUDA after it."""
    key = _key(code, language)
    if key not in _FILTERED:
        _FILTERED[key] = _filter(code, language)
    return _FILTERED[key]


def _filter(code, language):
    text, _ = filter_code(code, f"unit.{language}", language)
    if language != "cuda":
        for match in STRING.finditer(code):
            if C_LIKE.search(match.group(2)):
                text += filter_code(match.group(2), "unit.cu", "cuda")[0]
    return text


def fingerprint(code, language="python", boilerplate=()):
    """Winnowed fingerprints of ``code`` less the ``boilerplate`` hashes (a sorted array)."""
    text = filtered(code, language)
    kernel = language != "python" or bool(C_LIKE.search(code))
    if len(text) < K:
        return Fingerprint(set(), {}, 0.0, kernel=kernel)
    every = kgram_hashes(text)
    hashes, positions = winnow(every, WINDOW, remove_duplicates=False)
    if len(boilerplate):
        # boilerplate is sorted: one binary search per fingerprint
        at = np.minimum(np.searchsorted(boilerplate, hashes), len(boilerplate) - 1)
        own = boilerplate[at] != hashes
        hashes, positions = hashes[own], positions[own]
    index = defaultdict(list)
    for h, i in zip(hashes.tolist(), positions.tolist()):
        index[h].append(i)
    return Fingerprint(set(index), dict(index), float(get_token_coverage(index, K, len(text))) if index else 0.0,
                       every, kernel)


def threshold_of(fp):
    return KERNEL_THRESHOLD if fp.kernel else THRESHOLD


def kgram_hashes(text):
    """CRC-32 of every k-gram of ``text``: the same in every process, unlike ``hash``."""
    data, width = text.encode("utf-32-le"), 4 * K
    return np.array([zlib.crc32(data[i:i + width]) for i in range(0, len(data) - width + 1, 4)], dtype=np.int64)


def boilerplate_of(sources):
    """Every k-gram hash of the given cells' code: what every student was given."""
    hashes = [kgram_hashes(filtered(_strip_magics(s), language_of(s))) for s in sources]
    hashes = [h for h in hashes if len(h)]
    return np.unique(np.concatenate(hashes)) if hashes else np.array([], dtype=np.int64)


def overlap(unit, reference):
    """Share of ``unit``'s own code covered by fingerprints that ``reference`` also has."""
    if not unit.own:
        return 0.0
    idx, _ = find_fingerprint_overlap(unit.hashes, reference.hashes, unit.index, reference.index)
    if not len(idx):
        return 0.0
    slices = get_copied_slices(idx, K)
    return min(1.0, float(np.sum(slices[1] - slices[0])) / unit.own)


class Index:
    """Reference units by fingerprint, so that a unit is compared only with those it meets."""

    def __init__(self):
        self.units, self.by_hash = [], defaultdict(list)
        self.frequency = Counter()      # k-gram hash -> how many units have it

    def add(self, label, fp, owner=None, count=False):
        """Index ``fp`` under ``label``; ``count``: add its k-grams to ``frequency``."""
        if count and fp.kgrams is not None:
            self.frequency.update(set(fp.kgrams.tolist()))
        fp.kgrams = None
        if not fp.hashes:
            return
        number = len(self.units)
        self.units.append((label, fp, owner))
        for h in fp.hashes:
            self.by_hash[h].append(number)

    def matches(self, fp, exclude_owner=None, threshold=None):
        """[(percent, label, owner)] of the references covering ``threshold`` of ``fp`` (by default
        ``threshold_of(fp)``), best first."""
        if not fp.hashes or fp.own < MIN_OWN:
            return []
        threshold = threshold_of(fp) if threshold is None else threshold
        # positions of fp's fingerprints that each reference shares: each covers at most K characters
        counts = Counter()
        for h, positions in fp.index.items():
            for n in self.by_hash.get(h, ()):
                counts[n] += len(positions)
        need = threshold * fp.own / K
        found = []
        for number, count in counts.items():
            label, ref, owner = self.units[number]
            if count < need or (exclude_owner is not None and owner == exclude_owner):
                continue
            share = overlap(fp, ref)
            if share >= threshold:
                found.append((round(100 * share), label, owner))
        return sorted(found, key=lambda f: (-f[0], str(f[1])))


# ---- units ------------------------------------------------------------------------------------

def split_definitions(source):
    """{name: code} of the top-level definitions of a cell (its other code under ``TOP_LEVEL``)."""
    blocks, current, rest = {}, None, []
    for line in _strip_magics(source).splitlines():
        words = line.split()
        if line[:1].strip() and words:
            current = None
            name = _defined_name(words) if words[0] in DEFINITION else None
            if name:
                current = blocks.setdefault(name, [])
                current.extend(_decorators_above(rest))
        if current is not None:
            current.append(line)
        else:
            rest.append(line)
    out = {name: "\n".join(lines) for name, lines in blocks.items()}
    if any(line.strip() for line in rest):
        out[TOP_LEVEL] = "\n".join(rest)
    return out


def _decorators_above(rest):
    """Decorator lines just above a definition belong to it."""
    lines = []
    while rest and rest[-1].startswith("@"):
        lines.insert(0, rest.pop())
    return lines


def _defined_name(words):
    for word in words[1:]:
        head = word.split("(")[0].split(":")[0].split("[")[0]
        if head.isidentifier() and head not in ("def", "class", "cdef", "cpdef", "inline", "public", "struct",
                                                "void", "int", "double", "float", "object", "api", "nogil",
                                                "readonly", "unsigned", "long", "bint", "Py_ssize_t", "size_t",
                                                "real", "const", "extern", "static"):
            return head
    return None


def definitions(source):
    """{name: filtered text} of the top-level definitions in ``source`` (what tests and tools list)."""
    language = language_of(source)
    return {name: filtered(code, language) for name, code in split_definitions(source).items() if name != TOP_LEVEL}


def _methods(code):
    """{name: code} of the methods of a class (indented ``def`` blocks, dedented)."""
    out, current, indent = {}, None, None
    for line in code.splitlines():
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if stripped.startswith(("def ", "cdef ", "cpdef ", "async def ")) and (indent is None or depth <= indent):
            indent = depth
            name = _defined_name(stripped.split())
            current = out.setdefault(name, []) if name else None
        elif stripped and indent is not None and depth <= indent and not stripped.startswith(("@", "#")):
            current = None
        if current is not None:
            current.append(line[indent:] if len(line) >= indent else line.lstrip())
    return {name: "\n".join(lines) for name, lines in out.items()}


def _c_blocks(code):
    """Top-level blocks of C/CUDA source: each ends where its braces close."""
    blocks, start, depth = [], 0, 0
    for i, ch in enumerate(code):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
            if depth == 0:
                blocks.append(code[start:i + 1])
                start = i + 1
    return blocks


@functools.lru_cache(maxsize=2)
def package_index(root=None):
    """Index of every definition of the package's source tree (and every method on its own)."""
    root = Path(root) if root else _package_root()
    index = Index()
    for pattern in PACKAGE_SOURCES:
        for path in sorted(root.rglob(pattern)):
            if "__pycache__" in path.parts or (path.suffix == ".c" and path.with_suffix(".pyx").exists()):
                continue        # Cython's generated C is not the package's code
            code = path.read_text(errors="replace")
            module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
            if path.suffix in (".py", ".pyx", ".pxi"):
                language = "python" if path.suffix == ".py" else "cython"
                for name, unit in split_definitions(code).items():
                    if name == TOP_LEVEL:
                        continue
                    index.add(f"{module}.{name}", fingerprint(unit, language), count=True)
                    if unit.lstrip().startswith(("class ", "cdef class ")):
                        for method, body in _methods(unit.split("\n", 1)[-1]).items():
                            index.add(f"{module}.{name}.{method}", fingerprint(body, language))
                for kernel, block in cuda_kernels(code):
                    index.add(f"{module} {kernel}", fingerprint(block, "cuda"))
            else:
                for number, block in enumerate(_c_blocks(code)):
                    head = " ".join(block.split("(")[0].split()[-1:]) or str(number)
                    index.add(f"{path.relative_to(root.parent)}:{head}", fingerprint(block, "cuda"), count=True)
    return index


def _package_root():
    # found, not imported: importing the package would run its code in the grader's process
    from grader.package_build import package_dir

    return package_dir("needle_kernels")


def lecture_cells(folder):
    """[(label, source)] of every code cell of the lecture notebooks in ``folder``."""
    out = []
    for path in sorted(Path(folder).glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        out += [(f"{path.stem} cell {i}", c.source) for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and c.source.strip()]
    return out


@functools.lru_cache(maxsize=2)
def lecture_index(folder):
    index = Index()
    for label, source in lecture_cells(folder):
        index.add(label, fingerprint(_strip_magics(source), language_of(source)))
        for kernel, block in cuda_kernels(source):
            index.add(f"{label} {kernel}", fingerprint(block, "cuda"))
    return index


def default_lectures():
    """``course/lectures`` of this repository, when the grader runs from it."""
    folder = Path(__file__).resolve().parents[1] / "course" / "lectures"
    return folder if folder.is_dir() else None


# ---- notebooks --------------------------------------------------------------------------------

def declared_parts(source_notebook):
    """{notebook name: dotted package path} from the ``coursekit.start(aid, {...})`` call of the
    first code cell, or {} when the assignment declares no withheld parts."""
    import ast

    nb = nbformat.read(str(source_notebook), as_version=4)
    first = next((c for c in nb.cells if c.cell_type == "code"), None)
    if first is None:
        return {}
    try:
        tree = ast.parse(_strip_magics(first.source))
    except SyntaxError:
        return {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "start"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "coursekit"
                and len(node.args) >= 2):
            tasks = ast.literal_eval(node.args[1])
            return {name: (paths if isinstance(paths, str) else paths[0])
                    for names in tasks.values() for name, paths in names.items() if paths}
    return {}


def solution_cells(nb):
    """{grade_id: source} of a notebook's solution cells."""
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.metadata["nbgrader"].get("grade_id")}


def code_cells(nb):
    return [c.source for c in nb.cells if c.cell_type == "code"]


_CODE_SPAN = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)


def given_code(nb):
    """What every student of ``nb`` is given: its code cells, and the code its text spells out (each
    inline span and fenced block alone, and each cell's spans in their order, as a student following
    "build, in this order, ``self.attn = ...``, ``self.dropout = ...``" writes them)."""
    out = code_cells(nb)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        spans = [a or b for a, b in _CODE_SPAN.findall(cell.source)]
        out += spans + ["\n".join(spans)] if spans else []
    return out


def units_of(cells, boilerplate):
    """[(grade_id, name, fingerprint)] of the solution cells ``cells`` ({grade_id: source}): each
    top-level definition, and each kernel of the CUDA sources it holds on its own."""
    out = []
    for gid, source in cells.items():
        language = language_of(source)
        for name, code in split_definitions(source).items():
            out.append((gid, name, fingerprint(code, language, boilerplate)))
            out += [(gid, f"{name} {kernel}", fingerprint(block, "cuda", boilerplate))
                    for kernel, block in cuda_kernels(code)]
    return out


def cuda_kernels(code):
    """[(name, source)] of the kernels in the C-like strings of Python code (cupy's sources)."""
    out = []
    for match in STRING.finditer(code):
        if C_LIKE.search(match.group(2)):
            for block in _c_blocks(match.group(2)):
                head = block.split("(")[0].split()
                if "{" in block and head:
                    out.append((f"[kernel {head[-1]}]", block))
    return out


class Comparison:
    """The references of one assignment: the package, the lectures, and the class so far."""

    def __init__(self, release_cells, package_root=None, lectures=None, idioms=True):
        self.package = package_index(str(package_root) if package_root else None)
        self.lectures = lecture_index(str(lectures)) if lectures else Index()
        idioms = [h for h, n in self.package.frequency.items() if n > IDIOM] if idioms else []
        self.boilerplate = np.union1d(boilerplate_of(release_cells), np.array(idioms, dtype=np.int64))
        self.students = Index()
        self.units = {}

    def add_student(self, student, cells):
        self.units[student] = units_of(cells, self.boilerplate)
        for gid, name, fp in self.units[student]:
            self.students.add((student, gid, name), fp, owner=student)


def _release_code(course, assignment):
    release = {}
    code = []
    for nb_path in sorted(course.path("release", assignment).glob("*.ipynb")):
        nb = nbformat.read(str(nb_path), as_version=4)
        release.update({(nb_path.name, gid): src for gid, src in solution_cells(nb).items()})
        code += given_code(nb)
    return release, code


def similarity(course, assignment, record=True, lectures="default") -> Report:
    """Compare every submission's solution cells with the package, the lectures and each other;
    record private notes unless ``record`` is False."""
    report = Report(assignment)
    release, release_code = _release_code(course, assignment)
    cache = CourseState(course.root).root / "similarity" / "filtered.json"
    load_filter_cache(cache)
    known = len(_FILTERED)
    comparison = Comparison(release_code, lectures=default_lectures() if lectures == "default" else lectures)
    if len(_FILTERED) != known or not cache.exists():
        save_filter_cache(cache, list(_FILTERED))
    students = sorted(p.parent.name for p in course.path("submitted").glob(f"*/{assignment}") if p.is_dir())
    findings = defaultdict(list)
    notebooks = {}
    released = {gid: src for (_, gid), src in release.items()}
    for student in students:
        cells = {}
        for path in sorted(course.path("submitted", student, assignment).glob("*.ipynb")):
            try:
                nb = nbformat.read(str(path), as_version=4)
            except Exception:  # noqa: BLE001 - an unreadable notebook has its own note
                continue
            notebooks[student] = nb
            cells.update({gid: src for gid, src in solution_cells(nb).items()
                          if release.get((path.name, gid)) != src})
        comparison.add_student(student, cells)
        imported = imported_names(code_cells(notebooks[student]) if student in notebooks else [])
        for gid, source in cells.items():
            for what in suspicious_constructs(source, released.get(gid, ""), imported):
                report.suspicious.append((student, gid, what))
                findings[student].append(f"{gid}: the solution {what}")
    compare(comparison, report, findings)
    if record:
        for student in students:
            notes.record(course.root, assignment, student, "similarity", sorted(set(findings[student])),
                         private=True)
    return report


def compare(comparison, report, findings):
    """Fill ``report`` and ``findings`` ({student: [note]}) from a loaded ``Comparison``."""
    students = sorted(comparison.units)
    too_common = max(2, len(students) // 10)
    for student in students:
        for gid, name, fp in comparison.units[student]:
            for percent, label, _ in comparison.package.matches(fp)[:1]:
                report.package.append((student, gid, name, label, percent))
                findings[student].append(f"{gid}: {name} is {percent}% the package's {label}")
            for percent, label, _ in comparison.lectures.matches(fp)[:1]:
                report.lectures.append((student, gid, name, label, percent))
                findings[student].append(f"{gid}: {name} is {percent}% lecture {label}")
    # each unit against the other students' units: a unit that many students share is a common
    # solution (the task leaves one way to write it), not a copy
    pairs = {}      # (student, cell, name, other, their cell, their name) -> percent
    for student in students:
        for gid, name, fp in comparison.units[student]:
            best = {}
            for percent, (other, ogid, oname), _ in comparison.students.matches(fp, exclude_owner=student):
                best.setdefault(other, (percent, ogid, oname))
            if len(best) + 1 > too_common:
                report.common += 1
                continue
            for other, (percent, ogid, oname) in best.items():
                pairs[(student, gid, name, other, ogid, oname)] = percent
    seen = set()
    for (student, gid, name, other, ogid, oname), percent in sorted(pairs.items()):
        findings[student].append(f"{gid}: {name} overlaps {percent}% with {other}'s {ogid} {oname}")
        if (other, ogid, oname, student, gid, name) not in pairs:
            findings[other].append(f"{ogid}: {oname} is in {student}'s {gid} {name} ({percent}% of theirs)")
        pair = tuple(sorted((student, other)))
        if (pair, gid, name) not in seen and (pair, ogid, oname) not in seen:
            seen.add((pair, gid, name))
            report.shared.append((gid, name, list(pair), percent))
    return report


def similarity_lines(report: Report) -> list:
    """What `grader similarity` prints."""
    out = [f"{student}: {gid} {name} = the package's {label} ({percent}%)"
           for student, gid, name, label, percent in report.package]
    out += [f"{student}: {gid} {name} = lecture {label} ({percent}%)"
            for student, gid, name, label, percent in report.lectures]
    out += [f"{gid} {name}: {' = '.join(members)} ({percent}%)" for gid, name, members, percent in report.shared]
    out += [f"{student}: {gid} {what}" for student, gid, what in report.suspicious]
    return out
