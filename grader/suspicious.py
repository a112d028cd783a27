"""Constructs in a solution cell that reach the grading kit or the interpreter's machinery.

Read on the syntax tree, not the text, so that a name built at run time is still a call
to ``__import__`` and a comment that mentions ``gc`` is nothing. What is looked for:

* dynamic code: ``__import__``, ``importlib``, ``exec``/``eval``/``compile``, and the grading kit
  (``coursekit``, ``grader``) imported by a solution; string constants joined with ``+`` are
  folded, so ``__import__("course" + "kit.checks")`` names the module it imports;
* the garbage collector and the interpreter's objects: ``gc``, ``__code__``, ``__globals__``,
  ``__builtins__``/``builtins``, ``__subclasses__``, frames (``sys._getframe``,
  ``inspect.currentframe``/``stack``, ``f_locals``, ``f_back``, ...), ``ctypes``, ``sys.modules``,
  ``get_ipython``;
* other processes: ``subprocess``, ``multiprocessing``, ``os.system``, ``os.fork``, ``os.exec*``, ...;
* changes to what the cell did not create: assigning to or deleting an attribute (or an item of
  ``vars(...)``/``__dict__``) of an imported module or object or of a name bound to one
  (``coursekit.checks.close = ...``, ``t = np.testing; t.assert_allclose = ...``), and
  ``setattr``/``delattr`` on one.

Attributes of ``self``, of parameters and of objects the student made are theirs to set. A
construct the released cell already has is the scaffolding's, not the student's. Cells that are
not Python (``%%cython``) are read token by token for the same names.
"""

import ast
import functools
import io
import re
import tokenize

MODULES = {
    "importlib": "imports modules by hand (importlib)",
    "gc": "searches the garbage collector (gc)",
    "ctypes": "reaches the interpreter's memory (ctypes)",
    "subprocess": "starts processes (subprocess)",
    "multiprocessing": "starts processes (multiprocessing)",
    "builtins": "changes or reads builtins",
    "coursekit": "imports the grading kit",
    "grader": "imports the grader",
    "pty": "starts processes (pty)",
}
CALLS = {
    "__import__": "imports a module by a computed name (__import__)",
    "exec": "runs code from a string (exec)",
    "eval": "evaluates a string (eval)",
    "compile": "compiles code from a string (compile)",
    "get_ipython": "reaches the IPython shell (get_ipython)",
}
ATTRIBUTES = {
    "__code__": "rebuilds or swaps code objects (__code__)",
    "__globals__": "reaches a function's globals (__globals__)",
    "__builtins__": "changes or reads builtins (__builtins__)",
    "__subclasses__": "walks the class hierarchy (__subclasses__)",
    "_getframe": "reads the call stack (sys._getframe)",
    "currentframe": "reads the call stack (inspect.currentframe)",
    "stack": None,          # only inspect.stack
    "f_locals": "reads another frame's variables (f_locals)",
    "f_globals": "reads another frame's globals (f_globals)",
    "f_back": "walks the call stack (f_back)",
    "tb_frame": "walks the call stack (tb_frame)",
    "gi_frame": "walks the call stack (gi_frame)",
    "co_code": "rebuilds code objects (co_code)",
    "__closure__": "reaches a function's closure (__closure__)",
    "modules": None,        # only sys.modules
    "getsource": "reads the package's source (inspect.getsource)",
}
OS_CALLS = re.compile(r"^(system|popen|fork|forkpty|exec\w*|spawn\w*|posix_spawn\w*|kill|killpg)$")
NAMES = {"__builtins__": "changes or reads builtins (__builtins__)"}


def _string(node):
    """The value of a string built from constants with ``+``, ``%`` or f-strings, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string(node.left), _string(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_string(v) if not isinstance(v, ast.FormattedValue) else _string(v.value) for v in node.values]
        return None if None in parts else "".join(parts)
    return None


def _root(node):
    """The name an attribute or subscript chain starts from (``np`` of ``np.testing.x``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def imported_names(sources):
    """Names bound by import statements in ``sources`` (a notebook's code cells; magics dropped,
    cells that are not Python skipped)."""
    names = set()
    for source in [sources] if isinstance(sources, str) else sources:
        names |= _imports_of(source)
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _imports_of(source):
    try:
        tree = ast.parse(_python(source))
    except SyntaxError:
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name.split(".")[0]) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {(a.asname or a.name) for a in node.names}
    return frozenset(names)


def _python(source):
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


class _Finder(ast.NodeVisitor):
    def __init__(self, imported):
        self.imported = set(imported)
        self.found = []

    def note(self, node, what):
        self.found.append((getattr(node, "lineno", 0), what))

    def _module(self, node, name):
        top = name.split(".")[0]
        if top in MODULES:
            self.note(node, MODULES[top])

    def visit_Import(self, node):
        for alias in node.names:
            self._module(node, alias.name)
            self.imported.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        module = node.module or ""
        self._module(node, module)
        for alias in node.names:
            self.imported.add(alias.asname or alias.name)
            if module == "os" and OS_CALLS.match(alias.name):
                self.note(node, f"starts processes (os.{alias.name})")
            if module == "sys" and alias.name in ("modules", "_getframe"):
                self.note(node, ATTRIBUTES["_getframe"] if alias.name == "_getframe" else "edits or reads sys.modules")
            if module == "inspect" and alias.name in ("currentframe", "stack", "getsource"):
                self.note(node, ATTRIBUTES.get(alias.name) or "reads the call stack (inspect.stack)")
            if alias.name in CALLS:
                self.note(node, CALLS[alias.name])

    def visit_Name(self, node):
        if node.id in NAMES:
            self.note(node, NAMES[node.id])
        elif node.id in CALLS:
            self.note(node, CALLS[node.id])

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "__import__" and node.args:
            name = _string(node.args[0])
            if name is not None:
                self._module(node, name)
                self.note(node, f"imports {name!r} by a computed name (__import__)")
        if isinstance(func, ast.Attribute) and func.attr == "import_module" and node.args:
            name = _string(node.args[0])
            if name is not None:
                self._module(node, name)
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            owner = _root(node.args[0])
            if owner in self.imported or owner in ("builtins", "__builtins__"):
                attr = _string(node.args[1]) if len(node.args) > 1 else None
                self.note(node, f"changes {_dotted(node.args[0]) or owner}.{attr or '?'} with {func.id}")
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(node.args) > 1:
            attr = _string(node.args[1])
            if attr in ATTRIBUTES and ATTRIBUTES[attr]:
                self.note(node, ATTRIBUTES[attr])
        self.generic_visit(node)

    def visit_Attribute(self, node):
        owner = _dotted(node.value)
        if node.attr in ATTRIBUTES:
            what = ATTRIBUTES[node.attr]
            if node.attr == "stack":
                what = "reads the call stack (inspect.stack)" if owner == "inspect" else None
            if node.attr == "modules":
                what = "edits or reads sys.modules" if owner == "sys" else None
            if what:
                self.note(node, what)
        if owner == "os" and OS_CALLS.match(node.attr):
            self.note(node, f"starts processes (os.{node.attr})")
        self.generic_visit(node)

    def _target(self, target, verb):
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._target(element, verb)
            return
        if isinstance(target, ast.Starred):
            self._target(target.value, verb)
            return
        if isinstance(target, ast.Attribute):
            owner, shown = _root(target), _dotted(target)
        elif isinstance(target, ast.Subscript) and self._namespace(target.value):
            space = target.value.args[0] if isinstance(target.value, ast.Call) else target.value.value
            owner, shown = _root(space), f"{_dotted(space)}[{_string(target.slice) or '...'}]"
        else:
            return
        if owner in self.imported or owner in ("builtins", "__builtins__"):
            self.note(target, f"{verb} {shown or owner}, which it did not create")

    @staticmethod
    def _namespace(node):
        """``vars(x)`` or ``x.__dict__``: its items are x's attributes."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars":
            return bool(node.args)
        return isinstance(node, ast.Attribute) and node.attr == "__dict__"

    def _is_import(self, value):
        """An imported object reached by name (``np.testing``), or a module imported by hand."""
        if isinstance(value, (ast.Name, ast.Attribute)):
            return _root(value) in self.imported
        return isinstance(value, ast.Call) and (
            (isinstance(value.func, ast.Name) and value.func.id == "__import__")
            or (isinstance(value.func, ast.Attribute) and value.func.attr in ("import_module", "reload")))

    def visit_Assign(self, node):
        for target in node.targets:
            self._target(target, "changes")
        self.generic_visit(node)
        if self._is_import(node.value):
            # an alias of an imported object is that object: ``t = np.testing; t.assert_allclose = f``
            self.imported |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def visit_AugAssign(self, node):
        self._target(node.target, "changes")
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._target(node.target, "changes")
        self.generic_visit(node)

    def visit_Delete(self, node):
        for target in node.targets:
            self._target(target, "deletes")
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        # a parameter that shadows an imported name is the function's own object
        shadowed = {a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs}
        saved = self.imported
        self.imported = self.imported - shadowed
        self.generic_visit(node)
        self.imported = saved

    visit_AsyncFunctionDef = visit_FunctionDef


def _token_scan(source):
    """Names of the watched constructs in code that is not Python (Cython), from its tokens."""
    found = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(_python(source) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    names = [t.string for t in tokens if t.type == tokenize.NAME]
    seen = set(names)
    for name in seen:
        if name in MODULES and ("import" in seen or "cimport" in seen):
            found.append((0, MODULES[name]))
        if name in CALLS:
            found.append((0, CALLS[name]))
        if ATTRIBUTES.get(name):
            found.append((0, ATTRIBUTES[name]))
    if "modules" in seen and "sys" in seen:
        found.append((0, "edits or reads sys.modules"))
    return found


@functools.lru_cache(maxsize=1024)
def _findings(source, imported):
    try:
        tree = ast.parse(_python(source))
    except SyntaxError:
        return _token_scan(source)
    finder = _Finder(imported)
    finder.visit(tree)
    return tuple(finder.found)


def findings(source, context=()):
    """[(line, what)] of the watched constructs in ``source``; ``context``: the notebook's code
    cells (or their ``imported_names``), whose imports say which names are modules and imported
    objects."""
    imported = context if isinstance(context, frozenset) else imported_names(context)
    return list(_findings(source, imported))


def suspicious_constructs(source, released="", context=()):
    """What a solution cell does that its released version does not, as sorted phrases."""
    imported = context if isinstance(context, frozenset) else imported_names(context)
    given = {what for _, what in findings(released, imported)} if released else set()
    return sorted({what for _, what in findings(source, imported)} - given)
