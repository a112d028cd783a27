"""How easy the package is to live in, in a few numbers: where an op's name appears, the
longest source files, import circles, mode flags above the ops.

    python scripts/code_signals.py [OP ...]      (default: softmax rmsnorm)

A fused op's name should appear in its spec (needle_kernels/fused_specs.py), its kernels (the
registry, the numpy reference, one Cython section, one .cu file and its launch), its NDArray
function and its TensorOp, and nowhere else that restates its formula.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("needle_kernels", "course/coursekit", "grader")
SUFFIXES = (".py", ".pyx", ".pxi", ".h", ".cu", ".cuh")


def tracked_files(*paths):
    out = subprocess.run(["git", "ls-files", "--", *paths], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / line for line in out.stdout.splitlines()]


def files_naming(word, paths=("needle_kernels", "course/coursekit")):
    return sorted(str(p.relative_to(REPO)) for p in tracked_files(*paths)
                  if p.suffix in SUFFIXES + (".md",) and word in p.read_text(errors="replace"))


def longest_sources(count=5):
    # generated files (the element-wise wrappers, Cython's C output) are not written by anyone
    sizes = [(len(p.read_text(errors="replace").splitlines()), str(p.relative_to(REPO)))
             for p in tracked_files(*SOURCES) if p.suffix in SUFFIXES and "_elementwise.pxi" not in p.name]
    return sorted(sizes, reverse=True)[:count]


def import_scan():
    """The import-graph test's own scan: (circles, load-time assignments to another module)."""
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "autotests" / "test_import_graph.py")
    scan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scan)
    parsed = scan._parsed()
    return scan.cycles(scan.import_graph(parsed)), scan.foreign_assignments(parsed)


def main(argv=None):
    words = (argv if argv is not None else sys.argv[1:]) or ["softmax", "rmsnorm"]
    for word in words:
        found = files_naming(word)
        print(f"files naming {word} in needle_kernels and course/coursekit: {len(found)}")
        for path in found:
            print(f"    {path}")
    print("longest source files (lines):")
    for lines, path in longest_sources():
        print(f"    {lines:5d}  {path}")
    circles, assignments = import_scan()
    print(f"import circles in needle_kernels: {len(circles)}")
    print(f"load-time assignments to another module's names: {len(assignments)}")
    flags = [f"{p.relative_to(REPO)}:{n}" for p in tracked_files("needle_kernels/nn", "needle_kernels/apps")
             if p.suffix == ".py" for n, line in enumerate(p.read_text().splitlines(), 1) if "TRACING" in line]
    print(f"lines reading TRACING in needle_kernels/nn and apps: {len(flags)}")


if __name__ == "__main__":
    main()
