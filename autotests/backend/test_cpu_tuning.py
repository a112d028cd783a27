"""The per-CPU table of cpu_tuning.py: each family gets a kernel the backend has and blocks it
accepts, an unknown CPU the portable default, the products are right under every row's
blocks with every kernel this host can run (each forced in turn), and the convolutions under
every row's convolution blocks."""
import os
import subprocess
import sys

import numpy as np
import pytest
from backend_cases import get, put

from needle_kernels.backend_ndarray import cpu_tuning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What /proc/cpuinfo says on one CPU of each family (vendor, family, model as decimal), and the
# caches its cores report (L1d, L2).
SAMPLES = {
    "AMD Zen 4": ("AuthenticAMD", 25, 17, "AMD EPYC 9654 96-Core Processor", 32 << 10, 1 << 20),
    "AMD Zen 5": ("AuthenticAMD", 26, 2, "AMD EPYC 9755 128-Core Processor", 48 << 10, 1 << 20),
    "AMD Zen 3": ("AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor", 32 << 10, 512 << 10),
    "AMD Zen 1/2": ("AuthenticAMD", 23, 49, "AMD EPYC 7742 64-Core Processor", 32 << 10, 512 << 10),
    "Intel Sapphire/Emerald/Granite Rapids": ("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8481C",
                                              48 << 10, 2 << 20),
    "Intel Ice Lake/Tiger Lake": ("GenuineIntel", 6, 106, "Intel(R) Xeon(R) Platinum 8375C", 48 << 10, 1280 << 10),
    "Intel Skylake-SP/Cascade Lake": ("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Platinum 8259CL", 32 << 10, 1 << 20),
    "Intel Alder/Raptor/Meteor/Arrow Lake": ("GenuineIntel", 6, 151, "12th Gen Intel(R) Core(TM) i7-12700",
                                             48 << 10, 1280 << 10),
}

UNKNOWN = {
    "an Intel model not in the table": "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 42\n",
    "another vendor": "vendor_id\t: HygonGenuine\ncpu family\t: 24\nmodel\t\t: 1\n",
    "an ARM core": "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n",
    "an empty file": "",
}


def cpuinfo(tmp_path, text):
    path = tmp_path / "cpuinfo"
    # a second processor after a blank line, which read_cpu must not mix in
    path.write_text(text + "\nprocessor\t: 1\nvendor_id\t: Other\n")
    return str(path)


@pytest.fixture
def restore(cpu):
    old_limit = cpu.set_gemm_direct_limit(0)  # every product through the packed kernel
    yield
    cpu.set_gemm_direct_limit(old_limit)
    cpu_tuning.apply(cpu)  # this host's row again, as when the backend loaded


def test_every_sample_is_a_row_of_the_table():
    assert set(SAMPLES) == {t.family for *_, t in cpu_tuning.TABLE}


@pytest.mark.parametrize("family", sorted(SAMPLES))
def test_each_family_picks_its_row(tmp_path, family):
    vendor, fam, model, name, *_ = SAMPLES[family]
    text = f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {fam}\nmodel\t\t: {model}\nmodel name\t: {name}\n"
    cpu = cpu_tuning.read_cpu(cpuinfo(tmp_path, text))
    assert cpu == {"vendor": vendor, "family": fam, "model": model, "model_name": name}
    assert cpu_tuning.tuning_for(cpu).family == family


def test_a_model_number_not_in_the_table_is_known_by_its_flags(tmp_path):
    # a KVM guest on an Intel server core with AMX reported a desktop part's model number (167)
    flags = "fpu avx2 avx512f avx512bw amx_bf16 amx_tile amx_int8"
    text = f"vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\nflags\t\t: {flags}\n"
    cpu = cpu_tuning.read_cpu(cpuinfo(tmp_path, text))
    assert cpu["flags"] == frozenset(flags.split())
    assert cpu_tuning.tuning_for(cpu).family == "Intel Sapphire/Emerald/Granite Rapids"
    # without the flag, or on another vendor, the model number decides as before
    assert cpu_tuning.tuning_for({**cpu, "flags": frozenset({"avx512f"})}) is cpu_tuning.PORTABLE
    assert cpu_tuning.tuning_for({**cpu, "vendor": "AuthenticAMD"}) is cpu_tuning.PORTABLE
    assert cpu_tuning.tuning_for({**cpu, "model": 106}).family == "Intel Ice Lake/Tiger Lake"


@pytest.mark.parametrize("what", sorted(UNKNOWN))
def test_an_unknown_cpu_gets_the_portable_row(tmp_path, what):
    assert cpu_tuning.tuning_for(cpu_tuning.read_cpu(cpuinfo(tmp_path, UNKNOWN[what]))) is cpu_tuning.PORTABLE


def test_an_unreadable_cpuinfo_gets_the_portable_row(tmp_path):
    assert cpu_tuning.tuning_for(cpu_tuning.read_cpu(str(tmp_path / "missing"))) is cpu_tuning.PORTABLE


@pytest.mark.parametrize("family", sorted(SAMPLES) + ["portable"])
def test_each_row_runs_a_kernel_this_build_has(cpu, family):
    tuning = cpu_tuning.tuning_named(family)
    assert tuning.isa in cpu_tuning.KERNELS or tuning is cpu_tuning.PORTABLE
    assert set(cpu.available_isas()) <= set(cpu_tuning.KERNELS)
    kernel = cpu_tuning.kernel_for(tuning, cpu.available_isas())
    assert kernel in cpu.available_isas()
    if tuning.isa in cpu.available_isas():
        assert kernel == tuning.isa
    # without its kernel, a row falls back to the next narrower one, never a wider one
    assert cpu_tuning.kernel_for(tuning, ["avx2", "generic"]) == ("generic" if tuning.isa == "generic" else "avx2")
    assert cpu_tuning.kernel_for(tuning, ["generic"]) == "generic"


def test_the_cache_rule_gives_the_blocks_chosen_on_zen4():
    zen4 = cpu_tuning.tuning_named("AMD Zen 4")
    *_, l1, l2 = SAMPLES["AMD Zen 4"]
    blocks = cpu_tuning.blocks_for_caches({"L1d": l1, "L2": l2}, nr=32)
    assert blocks == cpu_tuning.DEFAULT_BLOCKS
    assert (blocks["kc"], blocks["mc"], blocks["band"]) == (zen4.kc, zen4.mc, zen4.band)
    assert cpu_tuning.blocks_for_caches({}, nr=32) == cpu_tuning.DEFAULT_BLOCKS


def test_the_convolution_blocks_follow_the_caches():
    # Sapphire Rapids' 2 MB L2 holds twice Zen 4's block of Winograd tiles, Zen 3's 512 KB half
    # of it; a 48 KB L1d takes half as many windows again as a 32 KB one
    def conv(family):
        *_, l1, l2 = SAMPLES[family]
        blocks = cpu_tuning.blocks_for_caches({"L1d": l1, "L2": l2}, nr=32)
        return blocks["winograd"], blocks["implicit"]

    zen4 = conv("AMD Zen 4")
    assert conv("Intel Sapphire/Emerald/Granite Rapids") == (2 * zen4[0], 3 * zen4[1] // 2)
    assert conv("AMD Zen 3") == (zen4[0] // 2, zen4[1])


def test_the_direct_kernel_reads_in_place_at_most_an_l2_of_b():
    # Zen 4's 1 MB L2 keeps the limit its products were measured with; Zen 3's 512 KB halves it
    # (a 512 x 512 B is then packed into strips before the direct kernel reads it); a bigger L2
    # than any measured keeps Zen 4's
    def direct(family):
        *_, l1, l2 = SAMPLES[family]
        return cpu_tuning.blocks_for_caches({"L1d": l1, "L2": l2}, nr=16)["direct"]

    assert direct("AMD Zen 4") == cpu_tuning.DEFAULT_BLOCKS["direct"] == 1 << 18
    assert direct("AMD Zen 3") == 1 << 17 < 512 * 512
    assert direct("Intel Sapphire/Emerald/Granite Rapids") == 1 << 18


def test_caches_read_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                                 ("2", "Unified", "2048K"), ("3", "Unified", "105M")]):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    assert cpu_tuning.read_caches(str(tmp_path)) == {"L1d": 48 << 10, "L2": 2 << 20}
    assert cpu_tuning.read_caches(str(tmp_path / "missing")) == {}


@pytest.mark.parametrize("family", sorted(SAMPLES) + ["portable"])
def test_products_under_each_row_with_every_kernel(cpu, restore, family):
    # each row applied as on its CPU (its caches), then each kernel this host can run forced
    # under its blocks: shapes that cross kc, mc and the band width, with partial tiles
    *_, l1, l2 = SAMPLES.get(family, (None,) * 4 + (32 << 10, 1 << 20))
    applied = cpu_tuning.apply(cpu, cpu_tuning.tuning_named(family), caches={"L1d": l1, "L2": l2})
    assert applied["family"] == family
    blocks = cpu.gemm_blocking()
    assert blocks == {k: applied[k] for k in ("kc", "mc", "band")}
    assert cpu.set_gemm_direct_limit(0) == applied["direct"]  # and the packed kernel for every shape
    assert cpu.set_gemm_direct_rows(0) == applied["direct_rows"] == cpu_tuning.tuning_named(family).direct_rows
    rng = np.random.default_rng(len(family))
    kc, mc, band = blocks["kc"], blocks["mc"], blocks["band"]
    shapes = [(mc + 13, kc + 7, 100), (2 * mc + 5, 2 * kc + 1, 45), (37, kc + 3, 2 * band + 17), (5, 3, 7)]
    for name in cpu.available_isas():
        cpu.set_isa(name)
        for m, n, p in shapes:
            a, b = rng.standard_normal((m, n), dtype=np.float32), rng.standard_normal((n, p), dtype=np.float32)
            out = cpu.Array(m * p)
            cpu.fill(out, np.nan)
            cpu.matmul(put(cpu, a), put(cpu, b), out, m, n, p)
            np.testing.assert_allclose(get(cpu, out).reshape(m, p), a.astype(np.float64) @ b, rtol=1e-4,
                                       atol=1e-4 * n**0.5, err_msg=f"{family}, {name}, {m}x{n}x{p}")


def _conv_windows(img, k):
    """(N, Ho, Wo, C, K, K) windows of a stride-1 convolution, in float64."""
    return np.lib.stride_tricks.sliding_window_view(img.astype(np.float64), (k, k), axis=(1, 2))


@pytest.mark.parametrize("family", sorted(SAMPLES) + ["portable", "blocks smaller than any row's"])
def test_convolutions_under_each_row(cpu, restore, family):
    # each row's convolution blocks as on its CPU, and blocks far smaller than any row's (many
    # blocks per thread, the last one partial): Winograd's convolution and weight gradient,
    # and the implicit convolution and its weight gradient, against float64 numpy
    from needle_kernels import backend_ndarray as nd
    from needle_kernels.ops import ops_conv

    if family in SAMPLES or family == "portable":
        *_, l1, l2 = SAMPLES.get(family, (None,) * 4 + (32 << 10, 1 << 20))
        applied = cpu_tuning.apply(cpu, cpu_tuning.tuning_named(family), caches={"L1d": l1, "L2": l2})
        assert cpu.conv_blocking() == {k: applied[k] for k in ("winograd", "implicit")}
    else:
        cpu.set_conv_blocking(1024, 256)
    rng = np.random.default_rng(len(family))
    n, h, c_in, c_out = 6, 18, 20, 24
    img = rng.standard_normal((n, h, h, c_in), dtype=np.float32)
    w = rng.standard_normal((3, 3, c_in, c_out), dtype=np.float32)
    g = rng.standard_normal((n, h - 2, h - 2, c_out), dtype=np.float32)
    windows = _conv_windows(img, 3)
    want = np.einsum("nhwcij,ijco->nhwo", windows, w)
    want_dw = np.einsum("nhwcij,nhwo->ijco", windows, g)
    d_img, d_w, d_g = (nd.array(x, device=nd.cpu()) for x in (img, w, g))
    got = {"Winograd": ops_conv._winograd_conv3x3(d_img, d_w),
           "implicit": nd.conv_implicit(d_img, d_w, 1, 0, 0, (h - 2, h - 2)),
           "Winograd dW": nd.winograd_weight_grad(d_img, d_g),
           "implicit dW": nd.conv_implicit_weight_grad(d_img, d_g, 3, 1, 0, 0)}
    for name, out in got.items():
        ref, depth = (want_dw, n * (h - 2) ** 2) if name.endswith("dW") else (want, 9 * c_in)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-3, atol=1e-3 * depth**0.5, err_msg=f"{family}, {name}")


def test_bad_conv_blocks(cpu, restore):
    for bad, match in (((512, 1 << 14), "winograd must be in"), ((1 << 17, 1 << 23), "implicit must be in"),
                       ((1 << 17, 0.5), "implicit")):
        with pytest.raises(ValueError, match=match):
            cpu.set_conv_blocking(*bad)


@pytest.mark.parametrize("bad, match", [((8, 192, 512), "kc must be in"), ((256, 0, 512), "mc must be in"),
                                        ((256, 192, 10**6), "band must be in"), ((256.5, 192, 512), "kc")])
def test_bad_blocks(cpu, bad, match):
    with pytest.raises(ValueError, match=match):
        cpu.set_gemm_blocking(*bad)


def run_python(code, **env):
    full_env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_the_environment_forces_a_row():
    code = ("from needle_kernels.backend_ndarray import ndarray_backend_cpu as cpu, cpu_tuning;"
            "print(cpu_tuning.applied()['family'], '|', cpu.gemm_blocking()['kc'])")
    out = run_python(code, NEEDLE_CPU_TUNING="Intel Skylake-SP/Cascade Lake")
    assert out.returncode == 0, out.stderr
    family, kc = out.stdout.strip().split(" | ")
    assert family == "Intel Skylake-SP/Cascade Lake" and int(kc) >= 64
    out = run_python(code, NEEDLE_CPU_TUNING="Pentium 4")
    assert out.returncode != 0 and "NEEDLE_CPU_TUNING: unknown CPU family 'Pentium 4'" in out.stderr
