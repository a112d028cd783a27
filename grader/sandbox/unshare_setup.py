"""Set up the fallback sandbox from inside `unshare` (new mount, net, pid, ipc, uts namespaces).

Runs as root of the new namespaces with `-I` and the standard library only: hides the
sensitive host paths under empty tmpfs mounts (keeping the interpreter reachable),
shows the job directory at a fixed path, brings up loopback for the kernel's
sockets, drops to the slot uid and execs the worker.

The mount namespace is private but the root file system is the host's: a folder made
outside a tmpfs of this namespace would be made on the host and outlive the run. So
every mount point made here lies on a tmpfs mounted here (the private /tmp, /home and
the scratch area), and the scratch area is detached before the worker starts.
"""

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

MS_BIND, MS_REC, MS_PRIVATE, MS_RDONLY, MS_REMOUNT = 4096, 16384, 1 << 18, 1, 32
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype=None, flags=0, data=None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def bind(source, target, readonly=False):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        open(target, "a").close()  # a single-module package: a file to bind it onto
    mount(source, target, None, MS_BIND | MS_REC)
    if readonly:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def unmount(target):
    if libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def loopback_up():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH", fcntl.ioctl(sock, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
    fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # IFF_UP


def main():
    spec = json.loads(sys.argv[1])
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # a private scratch area for stashing what must survive the hiding
    mount("tmpfs", "/mnt", "tmpfs", 0, "size=1m,mode=0755")
    stash = {}
    substitutes = spec.get("substitutes", {})
    for i, path in enumerate(spec["keep"] + [spec["job_dir"]] + sorted(substitutes.values())):
        stash[path] = f"/mnt/keep{i}"
        os.makedirs(stash[path])
        mount(path, stash[path], None, MS_BIND | MS_REC)
    # a directory the sandbox uid cannot traverse (e.g. /root holding the interpreter)
    # is replaced by an empty one, through which the kept paths are bound again
    closed = set()
    for path in spec["keep"]:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            if not os.stat(parent).st_mode & 0o001:
                closed.add(parent)
            parent = os.path.dirname(parent)
    for path in sorted(closed) + spec["hide"] + ["/tmp"]:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", 0, f"size={spec['tmp_mb']}m,mode=1777")
        elif os.path.isfile(path):
            mount("/dev/null", path, None, MS_BIND)
    for path in spec["keep"]:
        # a kept path missing after the hiding lies under a tmpfs mounted above (/tmp, a
        # closed folder), so the folders made for it are private to this namespace
        if not os.path.exists(path):
            os.makedirs(path, exist_ok=True)
        bind(stash[path], path, readonly=True)
    for host, replacement in sorted(substitutes.items()):
        # a build of a package shown where the package lies (it may live in the hidden course)
        bind(stash[replacement], host, readonly=True)
    for link, target in spec["links"]:
        # a prefix reached through a symlink under a hidden folder (/tmp): the real path is
        # bound above, the link is made again so the interpreter's own path resolves
        if not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(target, link)
    mount("tmpfs", "/home", "tmpfs", 0, f"size={spec['tmp_mb']}m,mode=0755")
    os.makedirs(spec["home"], mode=0o777)
    os.chmod(spec["home"], 0o777)
    # the job and the packages are shown on the private /tmp
    os.makedirs(spec["job_mount"], exist_ok=True)
    bind(stash[spec["job_dir"]], spec["job_mount"])
    if spec["packages"]:
        os.makedirs(spec["packages_mount"], mode=0o755, exist_ok=True)
        for name, path in spec["packages"].items():
            source = stash[substitutes[path]] if path in substitutes else path
            bind(source, os.path.join(spec["packages_mount"], name), readonly=True)
    # the stash holds writable binds of the job and of every kept path: not left reachable
    unmount("/mnt")
    loopback_up()
    if spec["uid"] is not None:
        os.setgroups([])
        os.setresgid(spec["uid"], spec["uid"], spec["uid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    os.chdir(spec["job_mount"])
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


if __name__ == "__main__":
    main()
