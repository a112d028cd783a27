"""The Python side of ``scripts/gpu_check.sh``: probe, versions, kernel warm-up, notebooks, summary.

    python scripts/gpu_check.py probe              # "gpu <name>" (exit 0) or "none <why>" (exit 1)
    python scripts/gpu_check.py env                # GPU, driver, CUDA, cupy, torch and tool versions
    python scripts/gpu_check.py build-ext          # setup.py's extensions in place, for an old setuptools
    python scripts/gpu_check.py warm-cuda          # compile every kernel of the CUDA backend once
    python scripts/gpu_check.py notebook PATH ...  # execute notebooks cell by cell, grade their test cells
    python scripts/gpu_check.py summary DIR        # one line from the section logs in DIR

Notebooks run without Jupyter: a GPU machine may have cupy and torch but no IPython, nbclient or
nbgrader, and nothing can be installed there. Code cells run in order in one fresh ``__main__``
namespace, as a kernel would run them; ``%load_ext Cython`` is a no-op and a ``%%cython`` cell is
compiled as IPython's Cython magic compiles it (same flags, names imported into the namespace). A
cell that raises is reported and the next one runs, as in nbgrader's autograde; a graded test cell
earns its points when it raises nothing, which is nbgrader's rule.
"""
import argparse
import ast
import builtins
import hashlib
import importlib
import importlib.util
import json
import linecache
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- probe and versions

def gpu_probe():
    """(name, None) of the first CUDA device cupy sees, else (None, why not)."""
    try:
        import cupy
    except ImportError:
        return None, "cupy is not installed"
    except Exception as exc:  # a broken install raises anything
        return None, f"cupy failed to import: {type(exc).__name__}: {exc}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"cupy finds no usable CUDA device: {type(exc).__name__}: {exc}"
    if count < 1:
        return None, "cupy sees no GPU"
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return (name.decode() if isinstance(name, bytes) else name), None


def cmd_probe(args):
    name, why = gpu_probe()
    print(f"gpu {name}" if name else f"none {why}")
    return 0 if name else 1


def _version(module):
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        return f"MISSING ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return getattr(mod, "__version__", "present")


def _run(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (out.stdout + out.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable ({type(exc).__name__})"


def _cuda_version(v):
    return f"{v // 1000}.{v % 1000 // 10}"


def cmd_env(args):
    import platform

    print(f"python {sys.version.split()[0]} at {sys.executable}; {platform.machine()}, {os.cpu_count()} cores")
    for module in ("numpy", "Cython", "setuptools", "cupy", "torch", "pytest", "hypothesis", "xdist",
                   "pytest_timeout", "matplotlib", "IPython", "nbclient", "nbgrader"):
        print(f"  {module:<15} {_version(module)}")
    print(f"  C compiler      {shutil.which('cc') or shutil.which('gcc') or 'MISSING'}; "
          f"g++ {shutil.which('g++') or 'MISSING'}; nvcc {shutil.which('nvcc') or 'MISSING'}")
    name, why = gpu_probe()
    if name is None:
        print(f"GPU: none ({why})")
    else:
        import cupy

        rt = cupy.cuda.runtime
        props = rt.getDeviceProperties(0)
        print(f"GPU: {name}, {props['totalGlobalMem'] / 2**30:.1f} GiB, {props['multiProcessorCount']} SMs, "
              f"compute capability {props['major']}.{props['minor']}")
        print(f"CUDA driver API {_cuda_version(rt.driverGetVersion())}, runtime {_cuda_version(rt.runtimeGetVersion())}; "
              f"cupy {cupy.__version__}, NVRTC {'.'.join(map(str, cupy.cuda.nvrtc.getVersion()))}")
    try:
        import torch

        print(f"torch {torch.__version__}, built for CUDA {torch.version.cuda}, "
              f"cuda available: {torch.cuda.is_available()}"
              + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
    except Exception as exc:
        print(f"torch: {type(exc).__name__}: {exc}")
    smi = shutil.which("nvidia-smi") or next(
        (p for p in ("/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi") if os.path.exists(p)), None)
    if smi:
        print("nvidia-smi:", _run([smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                   "--format=csv,noheader"]))
    else:
        print("nvidia-smi: not found")
    try:  # the driver's own version number, where nvidia-smi is missing
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        print("driver (NVML):", version.decode() if isinstance(version, bytes) else version)
    except Exception as exc:
        print(f"driver (NVML): unavailable ({type(exc).__name__})")
    if shutil.which("nvcc"):
        print("nvcc:", _run(["nvcc", "--version"]).splitlines()[-1])
    return 0


def cmd_build_ext(args):
    """setup.py's extensions built in place, without the project metadata in pyproject.toml.

    An older setuptools rejects that metadata (``license = "MIT"`` needs setuptools 77), and
    nothing newer can be installed on a machine without a package index; the extensions
    themselves need only Cython and a C compiler.
    """
    import runpy

    import setuptools
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    captured = {}
    real_setup = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        runpy.run_path(str(REPO / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = real_setup
    build = build_ext(Distribution({"ext_modules": captured["ext_modules"]}))
    build.inplace = 1
    build.parallel = args.jobs
    build.finalize_options()
    build.run()
    print(f"built in place: {', '.join(ext.name for ext in captured['ext_modules'])}")
    return 0


def cmd_warm_cuda(args):
    """Compile every kernel source of the CUDA backend, so the tests find them in cupy's cache."""
    sys.path.insert(0, str(REPO))
    from needle_kernels.backend_ndarray import ndarray_backend_cuda as cu

    if not cu.is_available():
        print(f"CUDA kernels: skipped ({cu.unavailable_reason()})")
        return 0
    ok, failed = [], []
    for source in cu.KERNELS:
        start = time.perf_counter()
        try:
            for kernel in cu.KERNELS[source]:
                cu._kernel(kernel)
        except Exception as exc:
            failed.append(source)
            print(f"  {source}: FAILED {type(exc).__name__}: {exc}")
        else:
            ok.append(source)
            print(f"  {source}: {len(cu.KERNELS[source])} kernels compiled in {time.perf_counter() - start:.1f} s")
    print(f"CUDA kernels: {len(ok)}/{len(cu.KERNELS)} sources compiled by NVRTC")
    return 1 if failed else 0


# ---------------------------------------------------------------- notebooks without Jupyter

class CythonCell:
    """IPython's ``%%cython`` magic without IPython: the cell becomes an extension module."""

    def __init__(self, cache_dir):
        self.cache_dir = Path(cache_dir)

    def parse(self, line):
        p = argparse.ArgumentParser(prog="%%cython", add_help=False)
        p.add_argument("--compile-args", action="append", default=[])
        p.add_argument("--link-args", action="append", default=[])
        p.add_argument("-l", "--lib", action="append", default=[])
        p.add_argument("-I", "--include", action="append", default=[])
        p.add_argument("-L", dest="library_dirs", action="append", default=[])
        p.add_argument("-+", "--cplus", action="store_true")
        p.add_argument("-3", dest="language_level", action="store_const", const=3)
        p.add_argument("-2", dest="language_level", action="store_const", const=2)
        p.add_argument("-a", "--annotate", action="store_true")
        p.add_argument("-f", "--force", action="store_true")
        p.add_argument("-q", "--quiet", action="store_true")
        p.add_argument("-n", "--name")
        return p.parse_args(shlex.split(line))

    def __call__(self, line, code, namespace):
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
        from setuptools.command.build_ext import build_ext

        args = self.parse(line)
        code = code if code.endswith("\n") else code + "\n"
        key = (code, line, sys.version_info, sys.executable)
        name = args.name or "_cython_magic_" + hashlib.sha256(str(key).encode()).hexdigest()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        pyx = self.cache_dir / f"{name}.pyx"
        pyx.write_text(code, encoding="utf-8")
        include = list(args.include)
        if "numpy" in code:
            import numpy

            include.append(numpy.get_include())
        ext = Extension(name, [str(pyx)], include_dirs=include, library_dirs=args.library_dirs,
                        extra_compile_args=args.compile_args, extra_link_args=args.link_args,
                        libraries=args.lib, language="c++" if args.cplus else "c")
        [ext] = cythonize([ext], quiet=True, force=True, language_level=args.language_level or 3)
        build = build_ext(Distribution({"ext_modules": [ext]}))
        build.build_lib = str(self.cache_dir)
        build.build_temp = str(self.cache_dir / "build")
        build.finalize_options()
        build.run()
        path = build.get_ext_fullpath(name)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        names = module.__dict__.get("__all__") or [k for k in vars(module) if not k.startswith("_")]
        for k in names:
            namespace[k] = getattr(module, k)


def _cell_code(source):
    """(kind, magic line, code) of a cell: kind is 'python' or 'cython'; line magics become no-ops."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%"):
        magic, _, rest = lines[0][2:].partition(" ")
        if magic != "cython":
            raise NotImplementedError(f"cell magic %%{magic} is not supported outside Jupyter")
        return "cython", rest, "\n".join(lines[1:]) + "\n"
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith("%"):
            magic = stripped[1:].split()[0] if stripped[1:].split() else ""
            if magic not in ("load_ext", "matplotlib", "config"):
                raise NotImplementedError(f"line magic %{magic} is not supported outside Jupyter")
            line = line[: len(line) - len(stripped)] + "pass  # " + stripped
        elif stripped.startswith("!"):
            raise NotImplementedError("shell escapes (!) are not supported outside Jupyter")
        out.append(line)
    return "python", "", "\n".join(out) + "\n"


def _run_python(code, filename, namespace):
    """Execute ``code`` as a notebook cell: the value of a final expression is printed."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    tree = ast.parse(code, filename)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
        if value is not None:
            print(repr(value))


def run_notebook(path, workdir, label):
    """Execute ``path``'s code cells in order; prints one ``NB`` line per graded cell and a total.

    Returns a dict of counts, also printed as a JSON line (``NBRESULT {...}``) for the summary.
    """
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    cython = CythonCell(Path(workdir) / "cython")
    res = {"notebook": label, "cells": 0, "errors": 0, "graded": 0, "graded_ok": 0, "points": 0.0,
           "max_points": 0.0, "cuda_graded": 0, "cuda_ok": 0, "cuda_points": 0.0, "cuda_max": 0.0,
           "first_error": None}
    start = time.perf_counter()
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        if not source.strip():
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id") or f"cell{index}"
        graded = bool(meta.get("grade")) and not meta.get("solution")
        # the CUDA parts of an assignment are the test cells that launch kernels through cupy
        cuda_part = graded and "cupy_or_host" in source
        points = float(meta.get("points", 0) or 0)
        print(f"--- [{label}] cell {index} {grade_id}", flush=True)
        res["cells"] += 1
        t0 = time.perf_counter()
        error = None
        try:
            kind, line, code = _cell_code(source)
            if kind == "cython":
                cython(line, code, namespace)
            else:
                _run_python(code, f"<{label} cell {index}>", namespace)
        except BaseException as exc:  # a cell's SystemExit fails the cell, as in a kernel
            if isinstance(exc, KeyboardInterrupt):
                raise
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        seconds = time.perf_counter() - t0
        if error:
            res["errors"] += 1
            res["first_error"] = res["first_error"] or f"{grade_id}: {error}"
        if graded:
            res["graded"] += 1
            res["max_points"] += points
            res["graded_ok"] += error is None
            res["points"] += points if error is None else 0.0
            if cuda_part:
                res["cuda_graded"] += 1
                res["cuda_max"] += points
                res["cuda_ok"] += error is None
                res["cuda_points"] += points if error is None else 0.0
            verdict = "PASS" if error is None else "FAIL"
            print(f"NB {label} {verdict} {grade_id}{' (CUDA)' if cuda_part else ''} "
                  f"{points if error is None else 0:g}/{points:g} in {seconds:.1f} s" + (f": {error}" if error else ""),
                  flush=True)
        elif error:
            print(f"NB {label} ERROR {grade_id} in {seconds:.1f} s: {error}", flush=True)
    res["seconds"] = round(time.perf_counter() - start, 1)
    if saved_main is not None:
        sys.modules["__main__"] = saved_main
    print(f"NB {label} TOTAL {res['points']:g}/{res['max_points']:g} points, {res['graded_ok']}/{res['graded']} "
          f"graded cells, CUDA parts {res['cuda_points']:g}/{res['cuda_max']:g}, {res['errors']} cell errors "
          f"of {res['cells']}, {res['seconds']} s", flush=True)
    print("NBRESULT " + json.dumps(res), flush=True)
    return res


NOTEBOOK_FLOOR = 30


def cmd_notebook(args):
    """Each notebook in a process of its own (a kernel's state, coursekit's switches, do not carry over)."""
    if args.child:
        path = Path(args.paths[0]).resolve()
        workdir = Path(tempfile.mkdtemp(prefix="gpu_check_nb_", dir=os.environ.get("GPU_CHECK_TMP")))
        os.chdir(workdir)  # what a notebook writes lands here, not in the checkout
        res = run_notebook(path, workdir, args.label or path.stem)
        return 0 if res["errors"] == 0 else 1
    status = 0
    end = time.monotonic() + args.deadline
    for i, p in enumerate(args.paths):
        # a notebook that hangs leaves the ones after it at least NOTEBOOK_FLOOR seconds each
        timeout = max(NOTEBOOK_FLOOR, end - time.monotonic() - NOTEBOOK_FLOOR * (len(args.paths) - 1 - i))
        label = Path(p).stem.split("_")[0] if Path(p).stem[0].isdigit() else Path(p).stem
        label = f"lecture{label}" if label.isdigit() else label
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "course")]
                                            + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x])
        env.setdefault("MPLBACKEND", "Agg")
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, os.path.abspath(__file__), "notebook", "--child", "--label", label, os.path.abspath(p)]
        try:
            rc = subprocess.run(cmd, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"NB {label} TIMEOUT after {timeout:.0f} s", flush=True)
            print("NBRESULT " + json.dumps({"notebook": label, "timeout": round(timeout)}), flush=True)
            rc = 124
        status = status or rc
    return status


# ---------------------------------------------------------------- summary

COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")
OUTCOME = re.compile(r"::\S*.*\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b|\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b.*::")
BENCH_ROW = re.compile(r"^(?P<name>\S.*?)\s+(?P<unit>GFLOP/s|GB/s)\s+(?P<a>[\d.]+)\s+(?P<b>[\d.]+)\s+(?P<ratio>[\d.]+)x\s*$")
MODEL_ROW = re.compile(r"^(?P<name>\S.*?)\s+(?P<tn>[\d.]+) ms\s+(?:(?P<ref>\S+)\s+(?P<tt>[\d.]+) ms\s+(?P<ratio>[\d.]+)x"
                       r"|-\s+-)\s*$")


def _status(dir_, section):
    """(rc, seconds, note) recorded by the shell script for ``section``; rc None when it did not run."""
    path = Path(dir_) / f"{section}.status"
    if not path.is_file():
        return None, 0, ""
    parts = path.read_text().strip().split(" ", 2)
    rc, seconds = int(parts[0]), int(parts[1])
    return rc, seconds, parts[2] if len(parts) > 2 else ""


def _read(out, section):
    path = Path(out) / f"{section}.log"
    return path.read_text(errors="replace") if path.is_file() else ""


def pytest_counts(text):
    """({'passed': n, ...}, complete): from pytest's closing line, else (a killed run) from the
    outcome ``-v`` printed for each test so far."""
    closing = [line for line in text.splitlines() if re.search(r"\bin [\d.]+s\b", line) and COUNT.search(line)]
    if closing:
        return {k.rstrip("s") if k.startswith("error") else k: int(n) for n, k in COUNT.findall(closing[-1])}, True
    counts = {}
    for m in map(OUTCOME.search, text.splitlines()):
        if m:
            key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                   "XFAIL": "xfailed", "XPASS": "xpassed"}[m.group(1) or m.group(2)]
            counts[key] = counts.get(key, 0) + 1
    return counts, False


def _short(name):
    name = re.sub(r"\s*\(cuBLAS\)", "", name)
    name = re.sub(r"^matmul (\d+)$", r"matmul\1", name)
    name = re.sub(r"\s+[\d.]+M$", "", name)
    name = re.sub(r" \d+x\d+(x\d+)?$", "", name)
    return name.replace(" ", "_")


def bench_ratios(text, after=None):
    """[(short name, ratio)] of the benchmark table rows (after the line containing ``after``)."""
    lines = text.splitlines()
    if after:
        idx = [i for i, line in enumerate(lines) if after in line]
        lines = lines[idx[0] + 1:] if idx else []
    return [(_short(m["name"].strip()), float(m["ratio"])) for m in map(BENCH_ROW.match, lines) if m]


MODEL_NAMES = {"ResNet9 fwd+bwd": "resnet9_fwd_bwd", "ResNet9 training step": "resnet9_step",
               "MLPResNet epoch": "mlp_epoch"}


def model_ratios(text):
    """[(short name, 'ratio x' or 'needle ms' where no reference ran)] of bench_models' closing table."""
    out = []
    for m in map(MODEL_ROW.match, text.splitlines()):
        if m:
            name = next((v for k, v in MODEL_NAMES.items() if m["name"].startswith(k)), _short(m["name"]))
            out.append((name, f"{float(m['ratio']):.2f}x" if m["ratio"] else f"{float(m['tn']):.1f}ms (no reference)"))
    return out


def _verdict(rc, seconds, note):
    if rc is None:
        return "not run"
    if note.startswith("skip"):
        return note
    if rc in (124, 137):
        return f"TIMEOUT after {seconds}s"
    return ("ok" if rc == 0 else f"FAIL rc={rc}") + f" {seconds}s"


def cmd_summary(args):
    out = args.dir
    state = Path(args.state)
    mode = (state / "mode").read_text().strip() if (state / "mode").is_file() else "?"
    if mode.startswith("nogpu"):
        why = mode.partition(" ")[2]
        line = f"GPU CHECK: no GPU ({why}); every section skipped"
        print(line)
        return 0
    parts = [f"GPU CHECK [{mode}]"]
    failed = False
    for section in ("env", "build"):
        rc, s, note = _status(state, section)
        failed |= rc not in (0, None) or rc is None
        extra = ""
        if section == "build":
            m = re.search(r"CUDA kernels: (\d+/\d+) sources", _read(out, section))
            extra = f", CUDA sources {m.group(1)}" if m else ""
        parts.append(f"{section} {_verdict(rc, s, note)}{extra}")
    for section in ("backend", "library"):
        rc, s, note = _status(state, section)
        text = _read(out, section)
        if rc is None or note.startswith("skip"):
            parts.append(f"{section} {_verdict(rc, s, note)}")
            failed = True
            continue
        counts, complete = pytest_counts(text)
        shown = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "error", "skipped")
                          if counts.get(k, 0) or k in ("passed", "failed"))
        failed |= rc != 0
        parts.append(f"{section} {shown}" + ("" if complete else " (partial)") + f" [{_verdict(rc, s, note)}]")
    rc, s, note = _status(state, "notebooks")
    nbs = [json.loads(line[len("NBRESULT "):]) for line in _read(out, "notebooks").splitlines()
           if line.startswith("NBRESULT ")]
    failed |= rc != 0
    shown = []
    for r in nbs:
        if "timeout" in r:
            shown.append(f"{r['notebook']} TIMEOUT")
        elif r["graded"]:
            shown.append(f"{r['notebook']} {r['points']:g}/{r['max_points']:g} pts (CUDA {r['cuda_points']:g}/"
                         f"{r['cuda_max']:g})" + (f" {r['errors']} errors" if r["errors"] else ""))
        else:
            shown.append(f"{r['notebook']} {r['cells'] - r['errors']}/{r['cells']} cells ok")
    parts.append("notebooks " + ("; ".join(shown) or "none ran") + f" [{_verdict(rc, s, note)}]")
    rc, s, note = _status(state, "bench_backend")
    text = _read(out, "bench_backend")
    gpu_rows = bench_ratios(text, after="CUDA backend vs cupy")
    rows = gpu_rows or bench_ratios(text)
    ref = "cupy/needle time" if gpu_rows else "numpy/needle time"
    failed |= rc != 0 or not rows
    parts.append(f"bench_backend ({ref}) " + (" ".join(f"{n}={r:.2f}x" for n, r in rows) or "no rows")
                 + f" [{_verdict(rc, s, note)}]")
    rc, s, note = _status(state, "bench_models")
    rows = model_ratios(_read(out, "bench_models"))
    failed |= rc != 0 or not rows
    parts.append("bench_models (needle/torch time) " + (" ".join(f"{n}={r}" for n, r in rows) or "no rows")
                 + f" [{_verdict(rc, s, note)}]")
    total = (state / "total").read_text().strip() if (state / "total").is_file() else "?"
    parts.append(f"total {total}s")
    print(" | ".join(parts))
    return 1 if failed else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe")
    sub.add_parser("env")
    sub.add_parser("warm-cuda")
    be = sub.add_parser("build-ext")
    be.add_argument("-j", "--jobs", type=int, default=4)
    nb = sub.add_parser("notebook")
    nb.add_argument("paths", nargs="+")
    nb.add_argument("--deadline", type=float, default=600, help="seconds for all the notebooks together")
    nb.add_argument("--label")
    nb.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    s = sub.add_parser("summary")
    s.add_argument("dir", help="the folder of the section logs")
    s.add_argument("--state", required=True, help="the folder of the sections' status files")
    args = p.parse_args(argv)
    return {"probe": cmd_probe, "env": cmd_env, "warm-cuda": cmd_warm_cuda, "build-ext": cmd_build_ext, "notebook": cmd_notebook,
            "summary": cmd_summary}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
