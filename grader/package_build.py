"""Builds of a package with the parts a task asks for taken out, for grading that task.

While a task is graded, the package's implementation of it must not be in the process at
all: a solution that imports it, rebuilds it from its source, runs it in a subprocess or
uses one of the helpers behind it gets nothing, because nothing is there. nbgrader takes
solutions out of notebooks when an assignment is generated; this takes them out of the
package the same way, from its source:

* every named definition (a module's function or class, or one method of a class) keeps
  its name and signature, so the package still imports and its tables still list it, but
  its body only raises ``NotImplementedError`` naming the task; docstrings go with it;
* the helpers behind them go too: a function or class of the package that a removed body
  uses, and that no code left in the package uses (module-level tables and re-exports do
  not count), is removed the same way, repeatedly, until nothing more goes;
* a compiled extension module that holds a named kernel is left out of the build (the
  package's numpy kernels stand in for it), and so are the Cython sources of every build
  (``.pyx``, ``.pxi``, the generated ``.c``), which only compiling needs.

A build is a folder laid out like the package; the sandbox shows it where the package is.
Unchanged files are hard links to the package's own, so a build costs little disk.
"""

import ast
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from grader.sandbox.atomic import write_atomic

SOURCES_LEFT_OUT = (".pyx", ".pxi", ".c", ".o")
BUILD_FORMAT = 1


@dataclass
class Removal:
    """What one build takes out: {dotted path under the package: the task it belongs to};
    ``keep``: names whose definitions stay even when only removed code uses them."""

    package: str
    paths: dict = field(default_factory=dict)
    keep: frozenset = frozenset()

    def digest(self, package_dir: Path) -> str:
        h = hashlib.sha256(json.dumps([BUILD_FORMAT, self.package, sorted(self.paths.items()),
                                       sorted(self.keep)]).encode())
        for path in sorted(package_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                stat = path.stat()
                h.update(f"{path.relative_to(package_dir)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return h.hexdigest()[:20]


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"{package} is not an importable package")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def resolve(package: str, path: str):
    """(owner, attribute, object) of a dotted path under the package, as coursekit resolves it."""
    names = f"{package}.{path}".split(".")
    for split in range(len(names) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(names[:split]))
        except ModuleNotFoundError:
            continue
        try:
            for name in names[split:-1]:
                owner = getattr(owner, name)
            return owner, names[-1], getattr(owner, names[-1])
        except AttributeError:
            break
    raise LookupError(f"{package}.{path} does not exist")


def _location(package: str, root: Path, path: str):
    """('source', file relative to the package, qualified name) or ('extension', file, None)."""
    owner, attribute, obj = resolve(package, path)
    target = getattr(obj, "__func__", obj)
    if isinstance(target, property):
        target = target.fget
    if isinstance(target, (type, types.FunctionType)):
        module = sys.modules.get(target.__module__)
        source = getattr(module, "__file__", None)
        if source and source.endswith(".py") and Path(source).resolve().is_relative_to(root):
            return "source", Path(source).resolve().relative_to(root), target.__qualname__
    module = owner if isinstance(owner, types.ModuleType) else sys.modules.get(type(owner).__module__)
    # a compiled kernel, or a name a backend module holds for one: the extension it comes from
    origin = getattr(sys.modules.get(getattr(obj, "__module__", "") or ""), "__file__", None)
    for candidate in (origin, getattr(module, "__file__", None)):
        if candidate and not candidate.endswith(".py") and Path(candidate).resolve().is_relative_to(root):
            return "extension", Path(candidate).resolve().relative_to(root), None
    if getattr(module, "__file__", "").endswith(".py"):
        # a module attribute bound to something defined elsewhere (a factory's kernel):
        # the assignment's line in that module is what goes
        return "source", Path(module.__file__).resolve().relative_to(root), attribute
    raise LookupError(f"{package}.{path}: no source or extension module in the package defines it")


# ---- reading the package -----------------------------------------------------------------------

class _Module:
    def __init__(self, relative: Path, text: str):
        self.relative = relative
        self.text = text
        self.tree = ast.parse(text)
        self.defs = {}          # qualified name -> node (module level, and methods of classes)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[node.name] = node
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            self.defs[f"{node.name}.{item.name}"] = item


def identifiers(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr


def _uses(modules):
    """{identifier: [(module, top-level definition name)]}: where names are used inside code.

    Only bodies count: a module-level table or re-export that names a definition keeps
    working with its stub, so it is no reason to keep the definition's code.
    """
    uses = {}
    for module in modules.values():
        for node in module.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                owners = [(node.name, node)]
                if isinstance(node, ast.ClassDef):
                    owners = [(f"{node.name}.{item.name}", item) for item in node.body
                              if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
                    owners.append((node.name, ast.Module(body=[i for i in node.body if not isinstance(
                        i, (ast.FunctionDef, ast.AsyncFunctionDef))] + node.bases + node.decorator_list,
                        type_ignores=[])))
                for qualname, body in owners:
                    for name in set(identifiers(body)):
                        uses.setdefault(name, []).append((module.relative, qualname))
    return uses


def helpers_of(modules, removed, keep=frozenset()):
    """The definitions that only removed code uses, found repeatedly (see the module docstring).

    Names in ``keep`` stay: the assignment's own notebook uses them, so they are part of what
    every student is given to work with.
    """
    uses = _uses(modules)
    removed = set(removed)

    def gone(where):
        module, qualname = where
        top = qualname.split(".")[0]
        return (module, qualname) in removed or (module, top) in removed

    while True:
        used_by_removed = set()
        for module, qualname in removed:
            node = modules[module].defs.get(qualname)
            if node is not None:
                used_by_removed.update(identifiers(node))
        found = set()
        for module in modules.values():
            for qualname in module.defs:
                if "." in qualname or (module.relative, qualname) in removed:
                    continue
                if qualname not in used_by_removed or qualname.startswith("__") or qualname in keep:
                    continue
                if all(gone(where) for where in uses.get(qualname, [])):
                    found.add((module.relative, qualname))
        if not found:
            return removed
        removed |= found


def tasks_reaching_blocked(declaration, package) -> dict:
    """{blocked path: the tasks whose package code reaches it}: a blocked object is taken out of
    those tasks' builds (and out of every build when no task's code reaches it)."""
    root = package_dir(package)
    modules = {p.relative_to(root): _Module(p.relative_to(root), p.read_text())
               for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    by_name = {}
    for module in modules.values():
        for qualname, node in module.defs.items():
            if "." not in qualname:
                by_name.setdefault(qualname, []).append(node)

    def top_name(path):
        try:
            return _location(package, root, path)[2].split(".")[0]
        except (LookupError, AttributeError):
            return None

    owned = {task: {top_name(p) for paths in names.values() for p in paths} - {None}
             for task, names in declaration.get("tasks", {}).items()}

    def reach(path, task):
        """Every top-level name the package code of ``path`` uses, directly or through helpers,
        short of another task's parts (what they use is theirs)."""
        try:
            kind, relative, qualname = _location(package, root, path)
        except LookupError:
            return set()
        node = modules[relative].defs.get(qualname) if kind == "source" else None
        others = set().union(*[names for t, names in owned.items() if t != task]) - owned[task]
        todo, seen = [node] if node is not None else [], set()
        while todo:
            for name in set(identifiers(todo.pop())) - seen:
                seen.add(name)
                if name not in others:
                    todo.extend(by_name.get(name, []))
        return seen

    reached = {task: set().union(*[reach(p, task) for paths in names.values() for p in paths])
               for task, names in declaration.get("tasks", {}).items()}
    return {path: {task for task, names in reached.items() if path.split(".")[-1] in names}
            for path in declaration.get("blocked", [])}


# ---- writing the build -------------------------------------------------------------------------

def _stub_body(message):
    return [ast.Raise(exc=ast.Call(func=ast.Name("NotImplementedError", ast.Load()),
                                   args=[ast.Constant(message)], keywords=[]), cause=None)]


def _stubbed(node, message):
    """A copy of a def or class node whose code only raises ``message``."""
    import copy

    node = copy.deepcopy(node)
    if isinstance(node, ast.ClassDef):
        body = []
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                item.body = _stub_body(message)
                body.append(item)
            elif isinstance(item, ast.Expr) and isinstance(getattr(item, "value", None), ast.Constant) \
                    and isinstance(item.value.value, str):
                continue    # the docstring
            else:
                body.append(item)
        node.body = body or [ast.Pass()]
    else:
        node.body = _stub_body(message)
    return node


def _rewrite(module: _Module, qualnames: dict) -> str:
    """The module's text with each listed definition replaced by its stub, layout kept elsewhere."""
    lines = module.text.splitlines(keepends=True)
    edits = []
    for qualname, message in qualnames.items():
        top = qualname.split(".")[0]
        if "." in qualname and top in qualnames:
            continue            # its class is stubbed whole
        node = module.defs.get(qualname)
        if node is None:
            # a module attribute assigned a kernel: the assignment raises instead
            for stmt in module.tree.body:
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == qualname
                                                        for t in stmt.targets):
                    edits.append((stmt.lineno, stmt.end_lineno, stmt.col_offset, f"def {qualname}(*args, **kwargs):\n"
                                  f"    raise NotImplementedError({message!r})\n"))
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        text = ast.unparse(_stubbed(node, message))
        edits.append((first, node.end_lineno, node.col_offset, text + "\n"))
    for first, last, indent, text in sorted(edits, reverse=True):
        pad = " " * indent
        replaced = "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))
        lines[first - 1:last] = [replaced]
    return "".join(lines)


def _link_or_copy(src: Path, dest: Path):
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def build(removal: Removal, dest: Path, notice: str = "{task}: {name} is not in the package while "
          "{task} is graded; write your own") -> dict:
    """Write the build into ``dest`` (the package's folder is ``dest/PACKAGE``).

    Returns what was removed: {"definitions": [...], "helpers": [...], "extensions": [...]}.
    """
    root = package_dir(removal.package)
    modules = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            relative = path.relative_to(root)
            modules[relative] = _Module(relative, path.read_text())
    named, extensions = {}, {}
    for dotted, task in removal.paths.items():
        kind, relative, qualname = _location(removal.package, root, dotted)
        if kind == "extension":
            extensions[relative] = task
        else:
            named[(relative, qualname)] = task
    removed = helpers_of(modules, [k for k in named if k[1] in modules[k[0]].defs], removal.keep)
    tasks = dict(named)
    for key in removed - set(named):
        # a helper belongs to the task whose removed code used it
        users = [t for (m, q), t in named.items() if key[1] in set(identifiers(modules[m].defs.get(q, ast.Pass())))]
        tasks[key] = users[0] if users else next(iter(named.values()))
    per_module = {}
    for (relative, qualname), task in tasks.items():
        per_module.setdefault(relative, {})[qualname] = notice.format(
            task=task, name=f"{removal.package}.{relative.with_suffix('').as_posix().replace('/', '.')}.{qualname}")
    out = Path(dest) / removal.package
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_dir() or "__pycache__" in relative.parts or path.suffix in SOURCES_LEFT_OUT:
            continue
        if relative in extensions:
            continue
        target = tmp / relative
        if relative in per_module:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_rewrite(modules[relative], per_module[relative]))
        else:
            _link_or_copy(path, target)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    summary = {"definitions": sorted(f"{m.as_posix()}:{q}" for m, q in named),
               "helpers": sorted(f"{m.as_posix()}:{q}" for m, q in removed - set(named)),
               "extensions": sorted(p.as_posix() for p in extensions)}
    write_atomic(Path(dest) / "build.json", json.dumps(summary, indent=1))
    return summary


def check_imports(dest: Path, package: str, modules=()) -> str:
    """'' when the build imports (with ``modules``) in a fresh interpreter, else the error."""
    code = ("import sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')"
            " and '__editable__' not in repr(f)]\n"
            f"sys.path.insert(0, {str(dest)!r})\n"
            f"import {package}\n"
            f"assert {package}.__file__.startswith({str(dest)!r}), {package}.__file__\n"
            + "".join(f"import {package}.{m}\n" for m in modules))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1]
