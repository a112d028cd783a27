"""needle_kernels loads without import circles, and no module fills in another's attributes.

Read from the sources' ASTs, not by importing: the graph has an edge A -> B when A's
module-level code (what runs while A loads: its body, class bodies, if/try blocks, not
function bodies) imports B. ``from P import n`` depends on the submodule P.n when n is
one, else on P itself. A cycle there means some module can see another half-loaded;
an ``X.attr = ...`` on an imported module or class means a name is None (or missing)
until some other module happens to load.
"""
import ast
from pathlib import Path

import needle_kernels

ROOT = Path(needle_kernels.__file__).parent
PACKAGE = ROOT.name


def _modules():
    """{dotted name: (path, is_package)} for every .py file of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _is_type_checking(node):
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _load_time_statements(body):
    """The statements that run while the module loads, nested blocks included."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(stmt, ast.If) and _is_type_checking(stmt):
            yield from _load_time_statements(stmt.orelse)
            continue
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            block = getattr(stmt, field, None)
            if isinstance(block, list):
                yield from _load_time_statements(block)
        for handler in getattr(stmt, "handlers", ()):
            yield from _load_time_statements(handler.body)
        for case in getattr(stmt, "cases", ()):
            yield from _load_time_statements(case.body)


def _resolve(name, is_package, node):
    """The absolute module an ImportFrom names."""
    if not node.level:
        return node.module or ""
    here = name.split(".") if is_package else name.split(".")[:-1]
    base = here[: len(here) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _parsed():
    return {name: (ast.parse(path.read_text(), str(path)), is_package)
            for name, (path, is_package) in _modules().items()}


def import_graph(parsed):
    graph = {}
    for name, (tree, is_package) in parsed.items():
        deps = set()
        for stmt in _load_time_statements(tree.body):
            if isinstance(stmt, ast.Import):
                deps.update(alias.name for alias in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                source = _resolve(name, is_package, stmt)
                for alias in stmt.names:
                    sub = f"{source}.{alias.name}"
                    deps.add(sub if sub in parsed else source)
        graph[name] = {d for d in deps if d in parsed}
    return graph


def cycles(graph):
    """Strongly connected components of more than one module, and modules importing themselves."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _imported_names(tree):
    names = set()
    for stmt in _load_time_statements(tree.body):
        if isinstance(stmt, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            names.update(a.asname or a.name for a in stmt.names if a.name != "*")
    return names


def _root_name(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def foreign_assignments(parsed):
    """(module, line, target) for each load-time assignment to an attribute of an imported name."""
    found = []
    for name, (tree, _) in parsed.items():
        imported = _imported_names(tree)
        for stmt in _load_time_statements(tree.body):
            targets = []
            if isinstance(stmt, ast.Assign):
                targets = stmt.targets
            elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
                targets = [stmt.target]
            elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                  and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "setattr"
                  and stmt.value.args):
                targets = [ast.Attribute(value=stmt.value.args[0], attr="?")]
            flat = []
            for t in targets:
                flat.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
            for t in flat:
                if isinstance(t, ast.Attribute) and _root_name(t) in imported:
                    found.append((name, stmt.lineno, ast.unparse(t)))
    return found


def test_the_scan_sees_the_package():
    graph = import_graph(_parsed())
    assert f"{PACKAGE}.autograd" in graph[f"{PACKAGE}.ops.ops_mathematic"]
    assert f"{PACKAGE}.backend_ndarray.device" in graph[f"{PACKAGE}.backend_ndarray.ndarray"]
    assert len(graph) > 40


def test_cycle_finder_reports_circles_and_self_imports():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph(_parsed())
    found = cycles(graph)
    report = "\n".join(
        " <-> ".join(c) + "\n" + "\n".join(f"    {m} -> {sorted(graph[m] & set(c))}" for m in c)
        for c in found)
    assert not found, f"import cycles in {PACKAGE}:\n{report}"


def test_no_module_sets_attributes_of_another_at_load_time():
    found = foreign_assignments(_parsed())
    assert not found, "load-time assignments to another module's names:\n" + "\n".join(
        f"    {m}:{line}: {target} = ..." for m, line, target in found)


def test_code_signals_prints_the_scan(capsys):
    """scripts/code_signals.py prints what this file's scan finds, and where an op's name appears."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("code_signals", ROOT.parent / "scripts" / "code_signals.py")
    signals = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(signals)
    signals.main(["rmsnorm"])
    out = capsys.readouterr().out
    assert "import circles in needle_kernels: 0" in out
    assert "    needle_kernels/fused_specs.py" in out
    assert "lines reading TRACING in needle_kernels/nn and apps: 0" in out
