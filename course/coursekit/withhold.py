"""Withheld parts: while an assignment runs, the package's version of what a task asks
for cannot stand in for the student's.

An assignment declares, per task, the notebook names the student writes and the package
objects they replace::

    coursekit.start("hw1", {
        "hw1_t2": {"Summation": "ops.Summation", "BroadcastTo": "ops.BroadcastTo"},
        "hw1_t4": {"find_topo_sort": "autograd.find_topo_sort"},
    })

From then on, in this Python process, every such package object is a switch, changed in
place so that every way of reaching it (``from needle_kernels.ops import Summation``, a
module that re-exports it, ``copy.copy``, an instance made earlier, a subclass) reaches
the switch:

* **student mode** (everywhere, by default): the package's ``Summation`` is the student's.
  ``Summation((1,))`` built anywhere, by the library too (``a.sum()``, ``ndl.summation``),
  is an instance of the class the notebook defines under that name; ``find_topo_sort(...)``,
  called by ``Tensor.backward``, runs the notebook's function. When the notebook has no
  such name, or binds it to the package's object, a subclass of it, code loaded from the
  package's files or an exact copy of the package's code (``inspect.getsource`` + ``exec``),
  the call fails with ``WithheldError("hw1_t2: Summation is yours to write ...")``.
* **reference mode**, only inside ``grading(task, names)`` (the test cells): every withheld
  name *not under test* runs the package's own code, so a test of one part never depends
  on another part the student may not have finished; the names under test stay the
  student's. Grading scopes do not nest, so code under test cannot open one for itself.

Re-executing a module that defines a withheld object (``importlib.reload``, deleting it
from ``sys.modules`` and importing it again) is refused by an audit hook, because it would
bring back unswitched copies. The checks are for what a solution cell can simply do; they
are not a proof against code that rewrites this module's state, which stays in plain view
in the submission and which the grader's notes point out to the instructor.
"""
import hashlib
import importlib
import inspect
import textwrap
import os
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field

PACKAGE = "needle_kernels"
# Set by the grader for each graded run: the tasks whose package code is not in this process
# at all ("*": every task's), because the package there is a build without them.
ABSENT_VARIABLE = "COURSEKIT_ABSENT_TASKS"


class WithheldError(RuntimeError):
    """A withheld part was reached without the student's own version of it."""


@dataclass
class Part:
    """One withheld name: the task that asks for it and the package objects it replaces."""
    task: str
    name: str                       # the name the notebook defines
    paths: tuple                    # dotted paths under the package, e.g. ("ops.Summation",)
    objects: list = field(default_factory=list)    # the package objects, switched in place
    kind: str = ""                  # "class" or "function"
    fingerprints: set = field(default_factory=set)  # of the package's code, to recognise copies
    blocked: bool = False           # a package object with no student twin: off while graded


class _State:
    def __init__(self):
        self.assignment = None
        self.parts = {}             # notebook name -> Part
        self.by_object = {}         # id(package object) -> Part
        self.impls = {}             # (name, attribute) -> the package's function
        self.reference = frozenset()    # names running the package's code right now
        self.in_scope = False
        self.started_late = False
        self.module_files = set()   # source files of modules defining withheld objects
        self.extension_modules = set()
        self.namespace = None
        self.checked = {}           # (name, id(candidate)) -> (candidate, error or None)
        self.reference_codes = frozenset()  # code of the reference implementations running now
        self.student_calls = {}     # name -> the arguments of each call of the student's now running


_STATE = _State()


# ---- where the student's code lives ------------------------------------------------------------

def notebook_namespace():
    """The notebook's global namespace (IPython's user namespace, else ``__main__``)."""
    if _STATE.namespace is not None:
        return _STATE.namespace
    try:
        ip = get_ipython()  # noqa: F821 (defined in IPython kernels)
        return ip.user_ns
    except NameError:
        return sys.modules["__main__"].__dict__


def _package_root():
    return os.path.dirname(importlib.import_module(PACKAGE).__file__)


def _from_package_file(code):
    filename = os.path.abspath(code.co_filename)
    return filename.startswith(_package_root() + os.sep)


def _codes(obj):
    """The code objects of a function, or of the functions a class defines itself."""
    if isinstance(obj, type):
        out = []
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if isinstance(value, property):
                value = value.fget
            if isinstance(value, types.FunctionType):
                out.append(value.__code__)
        return out
    if isinstance(obj, types.FunctionType):
        return [obj.__code__]
    return []


def _code_key(code):
    """What makes two code objects the same program, whatever file or line they came from."""
    consts = tuple(_code_key(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return (code.co_name, code.co_code, consts, code.co_names, code.co_varnames,
            code.co_argcount, code.co_kwonlyargcount, code.co_flags)


def fingerprint(obj):
    """A digest of an object's code and docstring: equal for ``exec(inspect.getsource(obj))``.

    Docstrings take part, so two honest versions of a one-line method never collide: every
    withheld package object has a docstring that the notebook's skeleton does not repeat.
    """
    if isinstance(obj, type):
        items = [("doc", obj.__doc__ or "")]
        items += sorted((c.co_name, repr(_code_key(c))) for c in _codes(obj))
    elif isinstance(obj, types.FunctionType):
        items = [("code", repr(_code_key(obj.__code__)))]
    else:
        return None         # compiled or built-in: no bytecode to compare
    return hashlib.sha256(repr(items).encode()).hexdigest()


def _source_fingerprint(obj):
    """The fingerprint of ``obj``'s source compiled afresh, as ``exec`` of it would compile it
    (a module's own compilation can differ in detail, e.g. by its ``__future__`` imports)."""
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
    code = compile(source, "<fingerprint>", "exec")
    if isinstance(obj, type):
        # run only the class statement's body, with stand-ins for its bases
        body = next(c for c in code.co_consts if isinstance(c, types.CodeType))
        items = [("doc", obj.__doc__ or "")]
        items += sorted((c.co_name, repr(_code_key(c))) for c in body.co_consts
                        if isinstance(c, types.CodeType))
        return hashlib.sha256(repr(items).encode()).hexdigest()
    # the function's code object, taken without running the def (its defaults may name
    # the package module's globals), found by its code's name: a kernel that a factory made
    # and renamed keeps its def's name there
    body = next((c for c in code.co_consts if isinstance(c, types.CodeType)
                 and c.co_name == obj.__code__.co_name), None)
    if body is None:
        return None
    return hashlib.sha256(repr([("code", repr(_code_key(body)))]).encode()).hexdigest()


def _why_not_students(part, candidate):
    """Why ``candidate`` cannot be the student's ``part`` (None when it can)."""
    pkg = f"{PACKAGE}.{part.paths[0]}" if part.paths else PACKAGE
    mine = f"{part.task}: {part.name} is yours to write in this assignment"
    if candidate is None:
        return f"{mine}; this notebook does not define it yet"
    if id(candidate) in _STATE.by_object:
        return f"{mine}; the package's {pkg} cannot stand in for it"
    if part.kind == "class":
        if not isinstance(candidate, type):
            return f"{mine}; it must be a class, not {type(candidate).__name__}"
        for base in candidate.__mro__[1:]:
            if id(base) in _STATE.by_object:
                return f"{mine}; it may not subclass the package's {pkg}"
    elif not callable(candidate):
        return f"{mine}; it must be a function, not {type(candidate).__name__}"
    if any(id(base) in _STATE.by_object for base in getattr(candidate, "__mro__", ())[1:]):
        return f"{mine}; it may not subclass the package's objects that do this assignment's work"
    module = getattr(candidate, "__module__", "") or ""
    if module == PACKAGE or module.startswith(PACKAGE + "."):
        return f"{mine}; {module}.{getattr(candidate, '__qualname__', part.name)} comes from the package"
    if any(_from_package_file(code) for code in _codes(candidate)):
        return f"{mine}; its code was loaded from the package's source files"
    if fingerprint(candidate) in part.fingerprints - {None}:
        return f"{mine}; it is a copy of the package's code"
    return None


def students(name):
    """The notebook's object for the withheld ``name``, checked; raises WithheldError otherwise."""
    part = _STATE.parts[name]
    candidate = notebook_namespace().get(name)
    # keyed by name too: one object (None above all) is checked against each part it stands for
    seen = _STATE.checked.get((name, id(candidate)))
    if seen is None or seen[0] is not candidate:
        seen = (candidate, _why_not_students(part, candidate))
        _STATE.checked[(name, id(candidate))] = seen
    if seen[1]:
        raise WithheldError(seen[1])
    return candidate


# ---- the switches ----------------------------------------------------------------------------

def _refusal(part):
    if part.blocked:
        return WithheldError(f"{part.task}: {PACKAGE}.{part.name} would do this assignment's work; "
                             "write your own (the package's runs only in the course's set-up cells)")
    return WithheldError(f"{part.task}: {part.name} is yours to write in this assignment; "
                         f"the package's {PACKAGE}.{part.paths[0]} runs only inside the tests")


_KIT_FILE = os.path.abspath(__file__)


def _called_from_reference():
    """Whether the package's own code of a part now running as the reference made this call.

    Walks out from the caller past the package's plumbing (autograd, module __call__) and
    this file's switches: the first frame that is a reference implementation says yes, the
    first frame of any other code (a notebook cell) says no. So the package's reference
    ``epoch`` may use a blocked helper while the student's ``epoch`` may not.
    """
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code in _STATE.reference_codes:
            return True
        if not (code.co_filename == _KIT_FILE or code.co_filename.startswith("<withheld")
                or _from_package_file(code)):
            return False
        frame = frame.f_back
    return False


def absent(part) -> bool:
    """Whether the package in this process is a build without ``part``'s code (see the grader)."""
    tasks = os.environ.get(ABSENT_VARIABLE, "")
    return tasks == "*" or part.task in tasks.split(",")


def _runs_package_code(name):
    """Whether the package's own code of ``name`` runs for this call."""
    if name in _STATE.reference:
        return True
    return _STATE.parts[name].blocked and bool(_STATE.reference_codes) and _called_from_reference()


def _reference_impl(name, slot, attribute):
    if not _runs_package_code(name):
        raise _refusal(_STATE.parts[name])
    return _STATE.impls[(name, slot, attribute)]


def _replacement(name):
    """The object that stands in for the package's ``name`` now: the student's, or an error."""
    part = _STATE.parts[name]
    if part.blocked:
        raise _refusal(part)
    return students(name)


def _same_call(outer, args, kwargs):
    outer_args, outer_kwargs = outer
    return (len(outer_args) == len(args) and all(a is b for a, b in zip(outer_args, args))
            and outer_kwargs.keys() == kwargs.keys() and all(outer_kwargs[k] is v for k, v in kwargs.items()))


def _call_students(name, args, kwargs):
    """The student's ``name`` called in the package's place.

    A student's ``name`` that only calls the package's ``name`` with the arguments it was given
    (a wrapper) reaches this switch again, which runs the student's again: that would recurse
    to Python's limit and print a traceback of a thousand frames. It fails at once instead,
    saying why. A call with other arguments (a recursion over a graph, a reshape of a compacted
    copy) goes on as written.
    """
    replacement = _replacement(name)
    running = _STATE.student_calls.setdefault(name, [])
    if running and _same_call(running[-1], args, kwargs):
        part = _STATE.parts[name]
        raise WithheldError(f"{part.task}: {name} is yours to write in this assignment; yours calls the "
                            f"package's {PACKAGE}.{part.paths[0]} with the arguments it was given, which "
                            f"here runs yours again and would never return: write {name} without it")
    running.append((args, kwargs))
    try:
        return replacement(*args, **kwargs)
    finally:
        running.pop()


def call_function(name, args, kwargs, slot=0):
    """What a withheld package function does when called: the student's, or the reference
    (``slot``: which of the part's package objects was called)."""
    if _runs_package_code(name):
        return _STATE.impls[(name, slot, None)](*args, **kwargs)
    return _call_students(name, args, kwargs)


def _switch_function(part, func, slot):
    if func.__code__.co_freevars:
        raise TypeError(f"{func.__qualname__} is a closure; only module-level functions can be withheld")
    impl = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__,
                              func.__closure__)
    impl.__kwdefaults__ = func.__kwdefaults__
    _STATE.impls[(part.name, slot, None)] = impl
    # The package's function object itself becomes the switch, so every alias of it does too
    # (and inspect.getsource of it shows this switch, not the package's code).
    source = (f"def {func.__name__}(*args, **kwargs):\n"
              f"    from coursekit.withhold import call_function\n"
              f"    return call_function({part.name!r}, args, kwargs, {slot})\n")
    namespace = {}
    exec(compile(source, f"<withheld {part.task}: {part.name}>", "exec"), namespace)
    func.__code__ = namespace[func.__name__].__code__
    func.__defaults__ = func.__kwdefaults__ = None


def _method_switch(name, slot, attribute):
    def switched(*args, **kwargs):
        return _reference_impl(name, slot, attribute)(*args, **kwargs)
    switched.__name__ = attribute
    switched.__qualname__ = f"{name}.{attribute}"
    return switched


def _switch_class(part, cls, slot):
    name = part.name
    for attribute, value in list(vars(cls).items()):
        if isinstance(value, (staticmethod, classmethod)):
            _STATE.impls[(name, slot, attribute)] = value.__func__
            setattr(cls, attribute, type(value)(_method_switch(name, slot, attribute)))
        elif isinstance(value, types.FunctionType):
            _STATE.impls[(name, slot, attribute)] = value
            setattr(cls, attribute, _method_switch(name, slot, attribute))
        elif isinstance(value, property):
            _STATE.impls[(name, slot, attribute)] = value
            getter = _method_switch(name, slot, attribute + ".fget")
            _STATE.impls[(name, slot, attribute + ".fget")] = value.fget
            setattr(cls, attribute, property(getter))
    base_new = cls.__new__

    def __new__(klass, *args, **kwargs):
        if klass is cls and not _runs_package_code(name):
            # an instance of the student's class: Python then skips the package's __init__
            return _call_students(name, args, kwargs)
        if base_new is object.__new__:
            return object.__new__(klass)
        return base_new(klass, *args, **kwargs)

    def __init_subclass__(klass, **kwargs):
        if part.blocked:
            raise _refusal(part)
        raise WithheldError(f"{part.task}: {name} is yours to write in this assignment; "
                            f"subclass its base ({cls.__mro__[1].__name__}), not the package's "
                            f"{PACKAGE}.{part.paths[0]}")

    cls.__new__ = __new__
    cls.__init_subclass__ = classmethod(__init_subclass__)


def _switch_extension_function(part, module, attribute, slot):
    """A compiled function, or a closure (a kernel a factory made), cannot be changed in place:
    its module attribute becomes a switch. The package reaches such kernels through their module
    (a device looks its kernels up there when first used), so every call made after ``start``
    reaches the switch."""
    _STATE.impls[(part.name, slot, None)] = getattr(module, attribute)

    def switched(*args, **kwargs):
        return call_function(part.name, args, kwargs, slot)
    switched.__name__ = attribute
    setattr(module, attribute, switched)
    _STATE.extension_modules.add(module.__name__)
    return switched


def _resolve(path):
    """(owner, attribute, object) of a dotted path under the package: a module's attribute, or a
    class's (``"backend_ndarray.ndarray.NDArray.reshape"``: the method, owned by the class)."""
    names = f"{PACKAGE}.{path}".split(".")
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
    raise LookupError(f"{PACKAGE}.{path} does not exist; check the assignment's withheld names")


def _audit(event, args):
    """Refuse to re-execute a module that defines a withheld object (reload, re-import)."""
    if _STATE.assignment is None:
        return
    if event == "exec" and isinstance(args[0], types.CodeType):
        filename = os.path.abspath(args[0].co_filename)
        if filename in _STATE.module_files:
            raise WithheldError(f"{_STATE.assignment}: {filename} defines parts you write in this "
                                "assignment; it cannot be loaded again while the assignment runs")
    elif event == "import" and args[0] in _STATE.extension_modules and args[1]:
        raise WithheldError(f"{_STATE.assignment}: {args[0]} holds parts you write in this assignment; "
                            "it cannot be loaded again while the assignment runs")


def _first_cell():
    """Whether no notebook cell ran before this one (always true outside IPython)."""
    try:
        ip = get_ipython()  # noqa: F821
    except NameError:
        return True
    # In[0] is empty and In[1] is the running cell; cells run without history don't count
    return ip is None or len(ip.user_ns.get("In", ())) <= 2


def start(assignment, tasks, blocked=(), namespace=None):
    """Withhold every part that ``tasks`` ({task id: {notebook name: package path(s)}}) names.

    A part may name no package path (``"grad_x": ()``) when the package has no twin of it:
    it is still checked to be the notebook's own. ``blocked`` lists package objects that
    would do the assignment's work without being a part's twin (``["nn.Linear"]``): they
    refuse to run while the assignment runs, tests included, except in ``reference()`` and
    when, inside a test, the package's reference code of another part calls them (the
    package's ``epoch`` may use a blocked training-loop helper; the student's may not).

    Run it as the first code cell of the notebook; running it again is harmless. Code run
    before it could keep unswitched package objects, so grading refuses to go on if any
    notebook cell ran first.
    """
    if _STATE.assignment is not None:
        if _STATE.assignment != assignment:
            raise WithheldError(f"this kernel already runs {_STATE.assignment}; restart it for {assignment}")
        return
    _STATE.started_late = not _first_cell()
    _STATE.namespace = namespace
    declared = [(task, name, paths, False) for task, names in tasks.items() for name, paths in names.items()]
    declared += [(assignment, path, path, True) for path in blocked]
    for task, name, paths, is_blocked in declared:
        paths = (paths,) if isinstance(paths, str) else tuple(paths)
        part = Part(task, name, paths, blocked=is_blocked)
        for path in paths:
            try:
                module, attribute, obj = _resolve(path)
            except LookupError:
                if os.environ.get(ABSENT_VARIABLE):
                    continue        # a graded run's build left the compiled module holding it out
                raise
            if id(obj) in _STATE.by_object:
                continue        # a re-export of an object already switched
            if isinstance(obj, type):
                kind = "class"
            elif isinstance(obj, types.FunctionType) and obj.__code__.co_freevars:
                kind = "closure"        # its code cannot be swapped in place (the closure's cells)
            elif isinstance(obj, types.FunctionType):
                kind = "function"
            elif callable(obj):
                kind = "extension"      # compiled (a Cython function has __code__ but no bytecode)
            else:
                raise TypeError(f"{PACKAGE}.{path}: only classes and functions can be withheld")
            part.kind = part.kind or ("function" if kind in ("extension", "closure") else kind)
            if kind != "extension":
                part.fingerprints |= {fingerprint(obj), _source_fingerprint(obj)} - {None}
            defining = sys.modules[obj.__module__] if kind != "extension" else module
            if getattr(defining, "__file__", None) and kind != "extension":
                _STATE.module_files.add(os.path.abspath(defining.__file__))
            slot = len(part.objects)
            if kind == "class":
                _switch_class(part, obj, slot)
            elif kind == "function":
                _switch_function(part, obj, slot)
            else:
                obj = _switch_extension_function(part, module, attribute, slot)
            part.objects.append(obj)
            _STATE.by_object[id(obj)] = part
        _STATE.parts[name] = part
    _STATE.assignment = assignment
    sys.addaudithook(_audit)
    from .record import declare
    declare(PACKAGE, assignment, tasks, blocked)


def parts(task=None):
    """The withheld parts (of one task), in declaration order."""
    return [p for p in _STATE.parts.values() if not p.blocked and (task is None or p.task == task)]


def _codes_of(names):
    """The code objects of the package implementations of ``names``."""
    out = set()
    for (name, _slot, _attribute), impl in _STATE.impls.items():
        if name in names:
            impl = getattr(impl, "fget", impl)
            code = getattr(impl, "__code__", None)
            if isinstance(code, types.CodeType):
                out.add(code)
    return frozenset(out)


@contextmanager
def grading(task, *names):
    """Run a test of ``names`` (all of ``task``'s parts when none are given).

    Inside, those names are the student's (checked first: a missing or package-made one
    fails here, naming the task) and every other withheld name runs the package's code, in
    the library and in the notebook's globals alike, so one part's test never depends on
    another part. The notebook's globals are put back on the way out.
    """
    if _STATE.assignment is None:
        raise WithheldError("run the notebook's first cell (coursekit.start) before its tests")
    if _STATE.in_scope:
        raise WithheldError(f"{task}: a test is already running; tests do not nest")
    if _STATE.started_late:
        raise WithheldError(f"{_STATE.assignment}: cells ran before the notebook's first cell; "
                            "restart the kernel and run the notebook from the top")
    under_test = set(names) if names else {p.name for p in parts(task)}
    unknown = under_test - {p.name for p in parts()}
    if unknown:
        raise LookupError(f"{task}: {sorted(unknown)} are not withheld parts of {_STATE.assignment}")
    for name in sorted(under_test, key=list(_STATE.parts).index):
        students(name)
    namespace = notebook_namespace()
    # a part whose package code is not in this process (a graded run's build) stays the student's
    others = [p for p in parts() if p.name not in under_test and not absent(p)]
    # the test's own names (a test cell runs at the notebook's top level) go on the way out,
    # and the notebook's own come back
    saved = dict(namespace)
    _STATE.in_scope = True
    _STATE.reference = frozenset(p.name for p in others)
    _STATE.reference_codes = _codes_of(_STATE.reference)
    from .record import scope
    try:
        for p in others:
            if p.objects:       # a part with no package twin keeps the notebook's own
                namespace[p.name] = p.objects[0]
        with scope(task):
            yield
    finally:
        _STATE.reference = frozenset()
        _STATE.reference_codes = frozenset()
        _STATE.in_scope = False
        for name in [n for n in namespace if n not in saved]:
            del namespace[name]
        namespace.update(saved)


@contextmanager
def reference():
    """Every withheld part runs the package's code: for locked set-up cells (loading data).

    Safe to offer: nothing is graded outside ``grading``, which cannot run inside it.
    """
    if _STATE.in_scope:
        raise WithheldError("a test is already running; tests do not nest")
    _STATE.in_scope = True
    _STATE.reference = frozenset(name for name, p in _STATE.parts.items() if not absent(p))
    try:
        yield
    finally:
        _STATE.reference = frozenset()
        _STATE.in_scope = False
