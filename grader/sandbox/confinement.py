"""The command line that confines one execution: bubblewrap, else unshare, else nothing.

bubblewrap builds an empty root and binds in only the interpreter, its packages and
the job directory, so the gradebook, the exchange, other submissions and the
instructor's home do not exist inside. `unshare` is the fallback when bubblewrap is
missing or cannot create namespaces: same namespaces, but it hides the known
sensitive paths instead of showing only the needed ones.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB_MOUNT = "/grader-job"          # the job directory, inside the sandbox
CODE_MOUNT = "/grader-sandbox"     # this package's worker and launcher, read-only
PACKAGES_MOUNT = "/grader-packages"
HOME = "/home/student"
# unshare keeps the host's root file system, where a new top-level folder would be left
# behind (and found again by the next run); its mount points live on its private /tmp
UNSHARE_JOB_MOUNT = "/tmp/grader-job"
UNSHARE_PACKAGES_MOUNT = "/tmp/grader-packages"
# what a checkout of this repository holds that submissions must not read: the source
# notebooks (solutions, hidden tests) and the history they are in
CHECKOUT = HERE.parents[1]
CHECKOUT_SECRETS = ("course/assignments", ".git")

ETC_FILES = [
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "passwd", "group",
    "nsswitch.conf", "hosts", "ssl", "ca-certificates", "fonts", "mime.types", "matplotlibrc",
]


@dataclass
class Confinement:
    """Where the sandbox exists on this machine and what it may see."""

    mode: str                      # "bwrap" | "unshare" | "none"
    readonly: list = field(default_factory=list)    # host paths shown read-only, same path
    packages: dict = field(default_factory=dict)    # name -> host package dir
    hidden: list = field(default_factory=list)      # host paths hidden in unshare mode
    tmp_mb: int = 256
    substitutes: dict = field(default_factory=dict)  # host path -> folder shown there instead
    extra_env: dict = field(default_factory=dict)

    def command(self, job_dir: str, argv_inside: list, uid=None) -> list:
        """The full command running `argv_inside` confined, with `job_dir` writable."""
        if self.mode == "bwrap":
            return self._bwrap(job_dir, argv_inside, uid)
        if self.mode == "unshare":
            return self._unshare(job_dir, argv_inside, uid)
        return list(argv_inside)

    def environment(self) -> dict:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": HOME, "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg",
            "NBGRADER_EXECUTION": "autograde", "JUPYTER_PLATFORM_DIRS": "1",
            # one BLAS thread: threads count against the process limit and the cores are shared
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            # %%cython compiles with Python's own CFLAGS (-O3 among them), or with $CFLAGS in their
            # place where it is set. Python's ask for debug information, which no graded run reads
            # and which lengthens every compile (benchmarks/README.md): so Python's flags, then -g0.
            # The course's kernel spec sets the same (Makefile).
            "CFLAGS": f"{sysconfig.get_config_var('CFLAGS') or ''} -g0".strip(),
        }
        if self.packages:
            env["PYTHONPATH"] = UNSHARE_PACKAGES_MOUNT if self.mode == "unshare" else PACKAGES_MOUNT
        env.update(self.extra_env)
        return env

    def hidden_paths(self) -> list:
        """The configured hidden paths and, in unshare mode, the checkout's secrets: unshare
        shows the whole host but these, while bubblewrap shows nothing it does not bind."""
        extra = [str(CHECKOUT / rel) for rel in CHECKOUT_SECRETS] if self.mode == "unshare" else []
        return sorted({h for h in self.hidden + extra if h and os.path.exists(h)})

    def shown_paths(self) -> list:
        """The read-only paths and packages, less any that would reveal a hidden path.

        An import path entry can be a whole checkout (an old-style editable install adds
        the repository to sys.path), and the course, the exchange or the grader's home
        folder may lie below it; such an entry is left out rather than exposing them.
        """
        wanted = self.readonly + list(self.packages.values())
        hidden = [os.path.realpath(h) for h in self.hidden_paths()]
        return [p for p in wanted if p and not any(
            h == os.path.realpath(p) or h.startswith(os.path.realpath(p).rstrip(os.sep) + os.sep)
            for h in hidden)]

    def paths_inside(self, job_dir: str) -> dict:
        """Where the job directory and this package's code are seen by the worker."""
        if self.mode == "bwrap":
            return {"job": JOB_MOUNT, "code": CODE_MOUNT}
        return {"job": job_dir if self.mode == "none" else UNSHARE_JOB_MOUNT, "code": str(HERE)}

    def _bwrap(self, job_dir, argv_inside, uid):
        cmd = ["bwrap", "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid",
               "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if os.geteuid() != 0:
            cmd.append("--unshare-user")
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                cmd += ["--symlink", os.readlink(host), str(host)]
            elif host.exists():
                cmd += ["--ro-bind", str(host), str(host)]
        cmd += ["--ro-bind", "/usr", "/usr"]
        for name in ETC_FILES:
            cmd += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        # the private /tmp and home come before anything is bound: bwrap applies mounts in
        # order, so a tmpfs mounted later would hide an interpreter or venv living under
        # /tmp (a checkout there), and one living under /tmp stays visible this way
        cmd += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(self.tmp_mb << 20), "--tmpfs", "/tmp",
                "--perms", "0777", "--size", str(self.tmp_mb << 20), "--tmpfs", HOME]
        # packages appear at their host paths too: an editable install's import finder
        # (setuptools' __editable__ mapping, in the venv) looks for them there, before
        # PYTHONPATH is consulted
        wanted = self.shown_paths()
        shown = _outermost(wanted)
        links = _symlinks(wanted)
        for parent in _ancestors(shown + [link for link, _ in links]):
            # bwrap would create these 0700 (root only), hiding what is bound below them
            cmd += ["--perms", "0755", "--dir", parent]
        for path in shown:
            cmd += ["--ro-bind", path, path]
        for link, target in links:
            # a prefix reached through a symlink (a venv linked into a checkout) is bound at
            # its real path above; the link makes sys.executable's own path resolve inside
            cmd += ["--symlink", target, link]
        for host, replacement in sorted(self.substitutes.items()):
            # after everything else, so it covers the package wherever an outer bind shows it
            cmd += ["--ro-bind", replacement, host]
        for name, path in sorted(self.packages.items()):
            cmd += ["--ro-bind", self.substitutes.get(path, path), f"{PACKAGES_MOUNT}/{name}"]
        cmd += ["--ro-bind", str(HERE), CODE_MOUNT,
                "--bind", job_dir, JOB_MOUNT, "--chdir", JOB_MOUNT, "--clearenv"]
        for key, value in self.environment().items():
            cmd += ["--setenv", key, value]
        if uid is not None:
            # bwrap runs privileged here; only setpriv's switch to a dedicated uid makes
            # RLIMIT_NPROC count (root is exempt from it) and drops every capability
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                    "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            cmd.append("--")
        return cmd + list(argv_inside)

    def _unshare(self, job_dir, argv_inside, uid):
        cmd = ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
               "--mount-proc"]
        if os.geteuid() != 0:
            cmd += ["--user", "--map-root-user"]
        spec = {
            "job_dir": job_dir, "job_mount": UNSHARE_JOB_MOUNT, "hide": self.hidden_paths(),
            "keep": _outermost(self.shown_paths() + [str(HERE)]),
            "links": _symlinks(self.shown_paths()),
            "packages": self.packages, "packages_mount": UNSHARE_PACKAGES_MOUNT, "home": HOME,
            "substitutes": self.substitutes,
            "tmp_mb": self.tmp_mb, "uid": uid, "env": self.environment(), "argv": list(argv_inside),
        }
        import json
        return cmd + ["--", sys.executable, "-I", str(HERE / "unshare_setup.py"), json.dumps(spec)]


def _outermost(paths):
    """Drop paths contained in another listed path (binding both is redundant)."""
    result = []
    for path in sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)}):
        if not any(path == kept or path.startswith(kept + os.sep) for kept in result):
            result.append(path)
    return result


def _ancestors(paths):
    found = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            found.add(parent)
            parent = os.path.dirname(parent)
    # /tmp is the sandbox's own tmpfs by then, so folders created under it are private too
    return sorted(p for p in found if p.split(os.sep)[1] not in ("usr", "etc", "proc", "dev"))


def _symlinks(paths):
    """(link, target) for every symlink on the way to `paths`, outermost first, outside /usr."""
    found = []
    for path in paths:
        if not path or not os.path.isabs(path):
            continue
        current = "/"
        for part in Path(path).parts[1:]:
            current = os.path.join(current, part)
            if os.path.islink(current) and current.split(os.sep)[1] not in ("usr", "bin", "sbin", "lib",
                                                                             "lib32", "lib64", "libx32"):
                if (current, os.readlink(current)) not in found:
                    found.append((current, os.readlink(current)))
                # the rest of the path is looked at through the link's real target
                current = os.path.realpath(current)
    return found


def interpreter_paths() -> list:
    """The host paths the sandboxed interpreter needs: its prefixes, the executable's home,
    and every folder on its isolated import path (site-packages reached through a `.pth`
    file, such as a venv layered on another one's packages, lives outside the prefix)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).parent), str(Path(os.path.realpath(sys.executable)).parent.parent)}
    paths.update(_isolated_import_path())
    return sorted(p for p in paths if p not in ("/", "/usr") and not p.startswith("/usr/"))


_IMPORT_PATH = []


def _isolated_import_path() -> list:
    """sys.path of `python -I` (no current folder, PYTHONPATH or user site): what the worker
    and kernel import from inside, asked of the interpreter itself once per process."""
    if not _IMPORT_PATH:
        proc = subprocess.run([sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                              capture_output=True, text=True, timeout=60, check=True)
        import json
        _IMPORT_PATH.append([p for p in json.loads(proc.stdout) if p and os.path.isdir(p)])
    return _IMPORT_PATH[0]


def package_dirs(names) -> dict:
    """Host directories of importable packages, for packages living outside the prefix."""
    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ValueError(f"package {name!r} listed in c.Sandbox.packages is not importable")
        if spec.submodule_search_locations:
            found[name] = os.path.realpath(list(spec.submodule_search_locations)[0])
        elif spec.origin:
            found[name] = os.path.realpath(spec.origin)
    return found


def probe(mode: str) -> tuple:
    """(works, detail): whether `mode` can create its namespaces on this machine."""
    if mode == "none":
        return True, "no confinement"
    tool = "bwrap" if mode == "bwrap" else "unshare"
    if shutil.which(tool) is None:
        return False, f"{tool} is not installed"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return False, "setpriv (util-linux) is not installed; needed to drop root inside the sandbox"
    conf = Confinement(mode=mode, readonly=interpreter_paths())
    uid = 65534 if os.geteuid() == 0 else None
    import tempfile
    with tempfile.TemporaryDirectory() as job:
        os.chmod(job, 0o777)
        cmd = conf.command(job, [sys.executable, "-I", "-c", "print('ok')"], uid=uid)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return False, f"{tool} failed: {err}"
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        return False, f"{tool} cannot create namespaces here: {(proc.stderr or proc.stdout).strip()[:300]}"
    return True, f"{tool} works ({'root, per-slot uid' if uid else 'user namespace'})"


def machine_allows(mode: str) -> tuple:
    """(allowed, detail): whether this machine lets `mode`'s tool create its namespaces at
    all, with the simplest command (the whole root shown read-only, nothing of ours).

    Tells the two failures of `probe` apart: a machine that forbids namespaces (a
    container without the privilege, user namespaces disabled) cannot sandbox, but
    when this succeeds and `probe` fails, the grader's own command line is at fault.
    """
    tool = "bwrap" if mode == "bwrap" else "unshare"
    if shutil.which(tool) is None:
        return False, f"{tool} is not installed"
    user = os.geteuid() != 0
    if mode == "bwrap":
        cmd = ["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid",
               "--unshare-net", "--unshare-ipc", "--unshare-uts"] + (["--unshare-user"] if user else [])
    else:
        cmd = ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork"] + \
              (["--user", "--map-root-user"] if user else [])
    try:
        proc = subprocess.run(cmd + ["true"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"{tool} failed: {err}"
    if proc.returncode != 0:
        return False, f"this machine does not let {tool} create namespaces: {proc.stderr.strip()[:300]}"
    return True, f"{tool} can create namespaces on this machine"


def diagnose(mode: str) -> tuple:
    """(state, detail) with state "works", "grader-fault" (the machine allows namespaces
    but the grader's sandbox does not start: a bug or a setting to fix, never a reason
    to skip) or "machine-forbids"."""
    ok, detail = probe(mode)
    if ok:
        return "works", detail
    allowed, why = machine_allows(mode)
    if allowed:
        return "grader-fault", f"{why}, but the grader's sandbox does not start: {detail}"
    return "machine-forbids", why


def choose(setting: str) -> tuple:
    """(mode, warnings) for `c.Sandbox.mode`; raises RuntimeError when nothing usable is left."""
    if setting == "none":
        return "none", ["c.Sandbox.mode = 'none': student code runs UNCONFINED, with the grader's "
                        "own permissions (only limits apply)"]
    candidates = ["bwrap", "unshare"] if setting == "auto" else [setting]
    problems = []
    for mode in candidates:
        ok, detail = _cached_probe(mode)
        if ok:
            warnings = [f"bubblewrap unusable ({problems[0]}); falling back to unshare, which hides "
                        f"known paths rather than showing only what is needed (`grader doctor` says "
                        f"whether the machine or the grader is at fault)"] if problems else []
            return mode, warnings
        problems.append(detail)
    raise RuntimeError("no sandbox available: " + "; ".join(problems) +
                       ". Install bubblewrap (apt-get install bubblewrap) or set "
                       "c.Sandbox.mode = 'none' to grade unconfined.")


_PROBES = {}


def _cached_probe(mode):
    if mode not in _PROBES:
        _PROBES[mode] = probe(mode)
    return _PROBES[mode]
