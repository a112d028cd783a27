"""`grader similarity ASSIGNMENT`: solutions that are the package's code, or another student's.

Each solution cell is split into its top-level definitions (``def``, ``class``, and Cython's
``cdef``/``cpdef``), and each definition into Python tokens (``tokenize``, which also reads
Cython) with identifiers numbered by first appearance, every number and string made one
placeholder, and comments, blank lines and layout dropped. Two definitions are the same
code when these sequences are equal: renaming variables, changing constants or docstrings
and reformatting do not hide a copy; a different structure does.

A definition is compared with

* the package's implementation of the name, when the assignment declares its withheld
  parts (the ``coursekit.start(...)`` call in the first code cell of the source), and
* the same definition in every other submission. Code shared by many submissions (more
  than a tenth of the class, and more than two) is a common solution, not a copy.

Short definitions (fewer than ``MIN_TOKENS`` tokens) are too small to say anything. Cells
left as released are skipped. Solution cells that reach the grading kit or rebuild the
package's objects (``coursekit``, ``importlib``, ``inspect.getsource``, ``__subclasses__``,
``gc``, ``__code__``, ``sys.modules``) are named too: the kit refuses the simple forms of
these, and whoever reads the note can judge the rest.

Findings are private notes for the instructor: no score changes, and feedback never shows
them; `grader export` has them in its `instructor_notes` column.
"""

import ast
import inspect
import io
import keyword
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field

import nbformat

from grader import notes

MIN_TOKENS = 60
DEFINITION = ("def", "class", "cdef", "cpdef", "async")
SUSPICIOUS = {"coursekit": "imports the grading kit", "importlib": "reloads or imports modules by hand",
              "getsource": "reads the package's source", "__subclasses__": "walks the class hierarchy",
              "gc": "searches the garbage collector", "__code__": "rebuilds functions from code objects",
              "modules": "edits sys.modules"}


@dataclass
class Report:
    assignment: str
    package: list = field(default_factory=list)     # (student, cell, name, package path)
    shared: list = field(default_factory=list)      # (cell, name, [students])
    common: int = 0                                 # groups left out as common solutions
    suspicious: list = field(default_factory=list)  # (student, cell, what)


def _strip_magics(source):
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def definitions(source):
    """{name: normalised tokens} of the top-level definitions in ``source``."""
    blocks, current = {}, None
    for line in _strip_magics(source).splitlines():
        words = line.split()
        if line[:1].strip() and words:
            current = None
            if words[0] in DEFINITION:
                name = _defined_name(words)
                if name:
                    current = blocks.setdefault(name, [])
        if current is not None:
            current.append(line)
    return {name: normalise("\n".join(lines)) for name, lines in blocks.items()}


def _defined_name(words):
    for word in words[1:]:
        head = word.split("(")[0].split(":")[0]
        if head.isidentifier() and head not in ("def", "class", "cdef", "cpdef", "inline", "public",
                                                "void", "int", "double", "float", "object", "api"):
            return head
    return None


def normalise(code):
    """The token sequence of ``code`` with names numbered, constants folded and layout gone."""
    names, out = {}, []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return tuple(code.split())
    for tok in tokens:
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
            out.append(names.setdefault(tok.string, f"v{len(names)}"))
        elif tok.type == tokenize.NUMBER:
            out.append("N")
        elif tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_START", -1):
            out.append("S")
        elif tok.type == tokenize.INDENT:
            out.append("{")
        elif tok.type == tokenize.DEDENT:
            out.append("}")
        else:
            out.append(tok.string)
    return tuple(out)


def declared_parts(source_notebook):
    """{notebook name: dotted package path} from the ``coursekit.start(aid, {...})`` call of the
    first code cell, or {} when the assignment declares no withheld parts."""
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


def package_definitions(parts):
    """{notebook name: (package path, normalised tokens)} of the package's implementations."""
    import importlib

    from coursekit.withhold import PACKAGE

    out = {}
    for name, path in parts.items():
        module_name, _, attribute = f"{PACKAGE}.{path}".rpartition(".")
        try:
            obj = getattr(importlib.import_module(module_name), attribute)
            source = inspect.getsource(obj)
        except (ImportError, AttributeError, OSError, TypeError):
            continue            # compiled objects have no source to compare with
        tokens = definitions(source).get(obj.__name__)
        if tokens:
            out[name] = (f"{PACKAGE}.{path}", tokens)
    return out


def _solution_cells(path):
    nb = nbformat.read(str(path), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.metadata["nbgrader"].get("grade_id")}


def _suspicious(source):
    found = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(_strip_magics(source) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    names = {t.string for t in tokens if t.type == tokenize.NAME}
    for word, what in SUSPICIOUS.items():
        if word in names and (word != "modules" or "sys" in names):
            found.append(what)
    return found


def similarity(course, assignment, record=True) -> Report:
    """Compare every submission's solution cells; record private notes unless ``record`` is False."""
    report = Report(assignment)
    release = {}
    for nb in sorted(course.path("release", assignment).glob("*.ipynb")):
        release.update({(nb.name, gid): src for gid, src in _solution_cells(nb).items()})
    parts = {}
    for nb in sorted(course.path("source", assignment).glob("*.ipynb")):
        parts.update(declared_parts(nb))
    package = package_definitions(parts) if parts else {}

    students = sorted(p.parent.name for p in course.path("submitted").glob(f"*/{assignment}") if p.is_dir())
    findings = defaultdict(list)
    groups = defaultdict(list)
    for student in students:
        for path in sorted(course.path("submitted", student, assignment).glob("*.ipynb")):
            try:
                cells = _solution_cells(path)
            except Exception:  # noqa: BLE001 - an unreadable notebook has its own note
                continue
            for gid, source in cells.items():
                if release.get((path.name, gid), None) == source:
                    continue
                for what in _suspicious(source):
                    report.suspicious.append((student, gid, what))
                    findings[student].append(f"{gid}: the solution {what}")
                for name, tokens in definitions(source).items():
                    if len(tokens) < MIN_TOKENS:
                        continue
                    if name in package and package[name][1] == tokens:
                        report.package.append((student, gid, name, package[name][0]))
                        findings[student].append(f"{gid}: {name} is the package's {package[name][0]} "
                                                 "(up to names, constants and layout)")
                    groups[(gid, name, tokens)].append(student)
    too_common = max(2, len(students) // 10)
    for (gid, name, _), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[1])):
        if len(members) < 2:
            continue
        if len(members) > too_common:
            report.common += 1
            continue
        report.shared.append((gid, name, members))
        for student in members:
            others = ", ".join(s for s in members if s != student)
            findings[student].append(f"{gid}: {name} is the same code as {others}'s "
                                     "(up to names, constants and layout)")
    if record:
        for student in students:
            notes.record(course.root, assignment, student, "similarity", sorted(set(findings[student])),
                         private=True)
    return report


def similarity_lines(report: Report) -> list:
    """What `grader similarity` prints."""
    out = [f"{student}: {gid} {name} = the package's {path}" for student, gid, name, path in report.package]
    out += [f"{gid} {name}: {' = '.join(members)}" for gid, name, members in report.shared]
    out += [f"{student}: {gid} {what}" for student, gid, what in report.suspicious]
    return out
