"""The Cython backend's kernels and cache blocks for the CPU it runs on.

The instruction set says which micro-kernels can run (``available_isas``); the
microarchitecture says which one to prefer and how to block for its caches. Zen 4
runs 512-bit FMAs as two 256-bit halves, Intel server cores have two 512-bit FMA
ports and a larger L1 and L2, the hybrid client cores have no AVX-512 at all. So the
choice is a table keyed by what the CPU reports (vendor, family, model, from
``/proc/cpuinfo``, else a flag only one family has), each row naming its family, its
preferred kernel and its blocks; an unknown CPU gets the portable default, the widest
kernel it can run.

Matmul blocks are measured where a row says so (``benchmarks/bench_blocking.py`` prints the
grid to measure them on a new CPU), as is, on Zen 3, from how many rows of A the packed
kernel beats the direct one even where B is small enough to read in place; elsewhere they
follow the caches the CPU reports (``/sys/devices/system/cpu/cpu0/cache``) by the rule
that gives the measured Zen 4 blocks from Zen 4's caches (:func:`blocks_for_caches`), as
the direct kernel's limit on B and the convolutions' blocks (a block of Winograd tiles, of
conv_implicit's windows) do on every CPU; the LSTM step and the exp/log/tanh it runs on
take the row's kernel's vector width. ``NEEDLE_CPU_TUNING`` names a row's family (or
``portable``) to force it.
"""
import dataclasses
import os
import re


@dataclasses.dataclass(frozen=True)
class Tuning:
    family: str
    isa: str  # the kernel to prefer; a narrower one where this build or CPU lacks it
    kc: int = 0  # the matmul's cache blocks; 0: from the caches the CPU reports (as the convolutions' always are)
    mc: int = 0
    band: int = 0
    direct_rows: int = 0  # from this many rows of A the packed kernel, not B read in place (0: any rows)
    source: str = "the caches the CPU reports"


INTEL_RAPIDS = Tuning("Intel Sapphire/Emerald/Granite Rapids", "avx512")

# (vendor, family, models or None for every model, tuning); the first match wins.
TABLE = (
    ("AuthenticAMD", 0x19, {*range(0x10, 0x20), *range(0x60, 0x80), *range(0xA0, 0xB0)},
     Tuning("AMD Zen 4", "avx512", kc=256, mc=192, band=512,
            source="measured on an AMD EPYC (Zen 4) with benchmarks/bench_blocking.py")),
    ("AuthenticAMD", 0x1A, None, Tuning("AMD Zen 5", "avx512")),
    ("AuthenticAMD", 0x19, None, Tuning("AMD Zen 3", "avx2", kc=256, mc=192, band=512, direct_rows=192,
                                        source="measured on an AMD EPYC (Zen 3) with benchmarks/bench_blocking.py")),
    ("AuthenticAMD", 0x17, None, Tuning("AMD Zen 1/2", "avx2")),
    ("GenuineIntel", 6, {0x8F, 0xCF, 0xAD, 0xAE}, INTEL_RAPIDS),
    ("GenuineIntel", 6, {0x6A, 0x6C, 0x7D, 0x7E, 0x8C, 0x8D}, Tuning("Intel Ice Lake/Tiger Lake", "avx512")),
    ("GenuineIntel", 6, {0x55}, Tuning("Intel Skylake-SP/Cascade Lake", "avx512")),
    ("GenuineIntel", 6, {0x97, 0x9A, 0xAA, 0xAC, 0xB7, 0xBA, 0xBF, 0xC5, 0xC6},
     Tuning("Intel Alder/Raptor/Meteor/Arrow Lake", "avx2")),
)

# (vendor, family, a flag only that family reports, tuning), for a CPU whose model number is not in
# TABLE: a hypervisor may report another model's number (a KVM guest on an Intel server core with
# AMX has reported model 167, a desktop part's), but not hide the instructions its guest can run.
BY_FEATURE = (
    ("GenuineIntel", 6, "amx_tile", INTEL_RAPIDS),
)

PORTABLE = Tuning("portable", "widest")

# The micro-kernels the backend is built with, widest first (ndarray_backend_cpu_gemm.h).
KERNELS = ("avx512", "avx2", "generic")

# What a CPU that reports no caches is blocked for (those of the Zen 4 row, and the
# convolutions' blocks chosen with bench_backend.py's conv rows on that CPU).
DEFAULT_BLOCKS = {"kc": 256, "mc": 192, "band": 512, "direct": 1 << 18, "winograd": 1 << 17, "implicit": 1 << 14}


def read_cpu(cpuinfo="/proc/cpuinfo"):
    """The first processor's vendor, family, model, model name and flags (where it lists them);
    empty where unreadable (another OS, an architecture that reports other fields)."""
    fields = {}
    try:
        with open(cpuinfo) as f:
            text = f.read()
    except OSError:
        return fields
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    out = {"vendor": fields.get("vendor_id", ""), "model_name": fields.get("model name", "")}
    for key, name in (("cpu family", "family"), ("model", "model")):
        if re.fullmatch(r"\d+", fields.get(key, "")):
            out[name] = int(fields[key])
    if "flags" in fields:
        out["flags"] = frozenset(fields["flags"].split())
    return out


def read_caches(root="/sys/devices/system/cpu/cpu0/cache"):
    """{"L1d": bytes, "L2": bytes} as the kernel reports them for one core; missing keys where
    it does not."""
    sizes = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return sizes
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(root, entry, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        match = re.fullmatch(r"(\d+)([KM]?)", size)
        if not match:
            continue
        nbytes = int(match[1]) * {"": 1, "K": 1 << 10, "M": 1 << 20}[match[2]]
        if level == "1" and kind == "Data":
            sizes["L1d"] = nbytes
        elif level == "2" and kind in ("Unified", "Data"):
            sizes["L2"] = nbytes
    return sizes


def blocks_for_caches(caches, nr):
    """Cache blocks from a core's L1d and L2 for a kernel nr floats wide. The matmul's: one
    kc x nr panel of B fills L1d, an mc x kc block of A about a fifth of L2, a column band of B
    about half of it; the most floats of B the direct kernel reads in place, an L2's worth, at
    most Zen 4's (a B that has left L2 is read again from L3 for every block of rows, down
    columns whose lines packing would have read once). The convolutions': a block of Winograd
    tiles with their products half of L2, a block of conv_implicit's windows two L1d's worth.
    Zen 4's 32 KB and 1 MB give the blocks chosen on it (DEFAULT_BLOCKS) with nr = 32."""
    if "L1d" not in caches or "L2" not in caches:
        return dict(DEFAULT_BLOCKS)
    l1, l2 = caches["L1d"], caches["L2"]
    kc = max(64, min(1024, l1 // (4 * nr) // 16 * 16))
    mc = max(48, min(1024, l2 // 5 // (4 * kc) // 48 * 48))
    band = max(128, min(4096, l2 // 2 // (4 * kc) // 64 * 64))
    direct = max(1 << 14, min(DEFAULT_BLOCKS["direct"], l2 // 4))
    winograd = max(1 << 12, min(1 << 22, l2 // 2 // 4))
    implicit = max(1 << 10, min(1 << 18, 2 * l1 // 4))
    return {"kc": kc, "mc": mc, "band": band, "direct": direct, "winograd": winograd, "implicit": implicit}


def tuning_for(cpu):
    """The table's row for a CPU as read_cpu describes it (by its model, else by its flags), or
    PORTABLE."""
    for vendor, family, models, tuning in TABLE:
        if cpu.get("vendor") == vendor and cpu.get("family") == family and (models is None or cpu.get("model") in models):
            return tuning
    for vendor, family, flag, tuning in BY_FEATURE:
        if cpu.get("vendor") == vendor and cpu.get("family") == family and flag in cpu.get("flags", ()):
            return tuning
    return PORTABLE


def tuning_named(name):
    """The row whose family is ``name`` ("portable" for PORTABLE)."""
    if name == PORTABLE.family:
        return PORTABLE
    for *_, tuning in TABLE:
        if tuning.family == name:
            return tuning
    families = [t.family for *_, t in TABLE] + [PORTABLE.family]
    raise ValueError(f"NEEDLE_CPU_TUNING: unknown CPU family {name!r}, expected one of {families}")


def kernel_for(tuning, available):
    """The kernel a row runs with, of those this build and CPU can run (widest first)."""
    if tuning.isa in KERNELS:  # it, or the next narrower one this CPU has
        for name in KERNELS[KERNELS.index(tuning.isa):]:
            if name in available:
                return name
    return available[0]


_applied = {}


def apply(cpu_module, tuning=None, caches=None):
    """Set the backend's kernel and cache blocks for ``tuning`` (default: this CPU's row, or the
    one NEEDLE_CPU_TUNING names): a row's measured matmul blocks where it has them, the rest
    from the CPU's caches; returns what was set."""
    if tuning is None:
        forced = os.environ.get("NEEDLE_CPU_TUNING")
        tuning = tuning_named(forced) if forced else tuning_for(read_cpu())
    kernel = kernel_for(tuning, cpu_module.available_isas())
    cpu_module.set_isa(kernel)
    blocks = blocks_for_caches(read_caches() if caches is None else caches, cpu_module.isa()["nr"])
    if tuning.kc:
        blocks.update(kc=tuning.kc, mc=tuning.mc, band=tuning.band)
    cpu_module.set_gemm_blocking(blocks["kc"], blocks["mc"], blocks["band"])
    cpu_module.set_gemm_direct_limit(blocks["direct"])
    cpu_module.set_gemm_direct_rows(tuning.direct_rows)
    cpu_module.set_conv_blocking(blocks["winograd"], blocks["implicit"])
    global _applied
    _applied = {"family": tuning.family, "kernel": kernel, **blocks, "direct_rows": tuning.direct_rows,
                "source": tuning.source}
    return dict(_applied)


def applied():
    """What apply() last set: the family, kernel, blocks and where the blocks come from."""
    return dict(_applied)


def tune_on_load():
    """What the Cython backend calls as it loads."""
    from . import ndarray_backend_cpu

    apply(ndarray_backend_cpu)
