"""Rebuild the lab extension's committed bundle from its TypeScript source (needs Node and npm).

    python grader/labextension/build.py        (or: make labextension)

npm installs the build tools (node_modules/, never committed), `tsc` compiles src/ to
lib/, JupyterLab's builder writes the bundle into grader/jupyter/labextensions/grader-term,
and SOURCE_HASH records the hash of the sources it was built from, which
autotests/grader/test_lab_term.py compares with the sources as they are, so a changed
source with a stale bundle fails there. `pip install` then installs the bundle without Node.
"""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parent / "jupyter" / "labextensions" / "grader-term"
SOURCE_HASH = HERE / "SOURCE_HASH"


def sources() -> list:
    """The files the bundle is built from, in a fixed order."""
    return sorted([HERE / "package.json", HERE / "tsconfig.json",
                   *(HERE / "src").rglob("*.ts"), *(HERE / "style").rglob("*.css")])


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.relative_to(HERE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()


def run(*argv):
    print("+", " ".join(map(str, argv)), flush=True)
    subprocess.run(list(map(str, argv)), cwd=HERE, check=True)


def main():
    npm = shutil.which("npm")
    if not npm:
        sys.exit("npm is not on PATH: the lab extension is built with Node 18 or later and npm")
    run(npm, "install", "--no-audit", "--no-fund")
    shutil.rmtree(HERE / "lib", ignore_errors=True)
    (HERE / "tsconfig.tsbuildinfo").unlink(missing_ok=True)
    run(HERE / "node_modules" / ".bin" / "tsc")
    shutil.rmtree(BUNDLE, ignore_errors=True)
    # JupyterLab's own core packages (its staging folder) decide what the bundle shares with it
    import jupyterlab

    core = Path(jupyterlab.__file__).parent / "staging"
    run(HERE / "node_modules" / ".bin" / "build-labextension", "--core-path", core, ".")
    SOURCE_HASH.write_text(source_hash() + "\n")
    print(f"built {BUNDLE.relative_to(HERE.parents[1])} from sources {SOURCE_HASH.read_text().strip()}")


if __name__ == "__main__":
    main()
