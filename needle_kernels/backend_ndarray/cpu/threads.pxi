# Thread count per kernel, and the instruction set of the vectorized loops and the matmul micro-kernel.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- threads

def set_num_threads(n):
    """Use up to n OpenMP threads in the following kernels (n >= 1)."""
    global _num_threads
    n = _int("set_num_threads", "n", n)
    if n < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n}")
    _num_threads = n


def after_fork_in_child():
    """Run single-threaded from now on: called in a process forked from one whose kernels
    already ran. libgomp's thread pool does not survive fork (the child has only the
    forking thread), and a parallel region there would wait forever for the missing
    threads; one thread never asks for them. PyTorch does the same in a forked child."""
    global _num_threads
    _num_threads = 1


def blas_threads_callback():
    """The address of a C function that runs OpenBLAS's parallel jobs on this extension's
    OpenMP threads, for openblas_set_threads_callback_function (see
    ndarray_backend_cpu_blas.h and blas_sharing.py)."""
    return nk_blas_threads_address()


def blas_threads_calls():
    """How many OpenBLAS calls have run their jobs through blas_threads_callback()."""
    return nk_blas_threads_calls()


def get_num_threads():
    """The most threads a kernel may use (default: OMP_NUM_THREADS or the core count)."""
    return _num_threads


cdef inline int _threads_for(Py_ssize_t work) noexcept nogil:
    cdef Py_ssize_t t
    if work < PARALLEL_MIN_WORK or _num_threads <= 1:
        return 1
    t = work // (PARALLEL_MIN_WORK // 2)
    return <int>(t if t < _num_threads else _num_threads)


cdef inline int _team(Py_ssize_t work) noexcept nogil:
    """_threads_for(work), and a fresh start for omp_threads_used: a kernel calls it once,
    before its parallel loops."""
    nk_reset_threads()
    return _threads_for(work)


cdef inline Py_ssize_t _round_up(Py_ssize_t x, Py_ssize_t multiple) noexcept nogil:
    return (x + multiple - 1) // multiple * multiple


cdef inline Py_ssize_t _chunks(Py_ssize_t n, Py_ssize_t parts, Py_ssize_t multiple) noexcept nogil:
    """The length of each of `parts` shares of n items, rounded up to a multiple of `multiple`.
    Shares of whole multiples of 16 floats (a 64-byte line) keep threads off each other's
    cache lines."""
    return _round_up((n + parts - 1) // parts, multiple)


def num_threads_for(work):
    """How many threads a kernel of this many elements (flops for matmul) runs on."""
    return _threads_for(_int("num_threads_for", "work", work))


def set_gemm_direct_limit(floats):
    """The most elements of B the direct kernel reads in place (default 2**18); returns the
    previous limit. 0 sends every product through the packed kernel (for tests and for
    measuring both paths); 1 makes every direct product of 64 rows or more pack B's strips."""
    global _direct_b
    floats = _int("set_gemm_direct_limit", "floats", floats)
    if floats < 0:
        raise ValueError(f"set_gemm_direct_limit: floats must be >= 0, got {floats}")
    old, _direct_b = _direct_b, floats
    return old


def set_gemm_direct_rows(rows):
    """From how many rows of A a product wider than GEMM_DIRECT_NARROW columns goes through the
    packed kernel even where B is small enough to read in place (0, the default: whatever the
    rows; a product GEMM_DIRECT_DEEP deep, of a row-major A, whose B the direct kernel packs is
    exempt); returns the previous value. Where the strided walk down B's columns refills L1 from
    L2 at every k, enough rows repay packing B once (cpu_tuning.py sets it per CPU family)."""
    global _direct_rows
    rows = _int("set_gemm_direct_rows", "rows", rows)
    if rows < 0:
        raise ValueError(f"set_gemm_direct_rows: rows must be >= 0, got {rows}")
    old, _direct_rows = _direct_rows, rows
    return old


def omp_threads_used():
    """How many distinct OpenMP threads ran a chunk of the most recent kernel."""
    return nk_threads_used()


def available_isas():
    """Instruction sets this build and CPU can run the kernels with, widest first."""
    return [nk_gemm_kernels[i].name.decode() for i in range(nk_gemm_nkernels) if nk_gemm_supported(i)]


def gemm_direct_rule():
    """When the direct kernel reads B in place: B of at most ``limit`` floats, in a product of
    fewer than ``rows`` rows of A (0: any rows) or at most ``narrow`` columns; a product at least
    ``deep`` deep whose B it packs into strips, and whose A is not transposed, takes it whatever
    the rows."""
    return {"limit": _direct_b, "rows": _direct_rows, "narrow": GEMM_DIRECT_NARROW, "deep": GEMM_DIRECT_DEEP}


def isa():
    """The instruction set in use, with the matmul micro-kernel's register tile (mr x nr) and the
    cache blocks in use (gemm_blocking())."""
    k = nk_gemm_kernels[_gemm_index]
    return {"name": k.name.decode(), "mr": k.mr, "nr": k.nr, **gemm_blocking()}


def gemm_blocking():
    """The packed matmul's cache blocks: kc (depth of a packed slice), mc (most rows of A packed
    at once) and band (column band of a product with at most mc rows)."""
    return {"kc": _kc, "mc": _mc, "band": _band}


def set_gemm_blocking(kc, mc, band):
    """Set the packed matmul's cache blocks (see gemm_blocking; cpu_tuning.py picks them for
    the CPU it runs on). Any values compute the same product; they only move the speed."""
    global _kc, _mc, _band
    values = {}
    for name, value, low, high in (("kc", kc, 16, 4096), ("mc", mc, 16, 8192), ("band", band, 16, 65536)):
        value = _int("set_gemm_blocking", name, value)
        if not low <= value <= high:
            raise ValueError(f"set_gemm_blocking: {name} must be in [{low}, {high}], got {value}")
        values[name] = value
    _kc, _mc, _band = values["kc"], values["mc"], values["band"]


def conv_blocking():
    """The convolutions' blocks: winograd, the floats of one block of Winograd tiles with their 16
    products; implicit, the floats of windows conv_implicit takes per block of pixels."""
    return {"winograd": _winograd_block_floats, "implicit": _implicit_block_floats}


def set_conv_blocking(winograd, implicit):
    """Set the convolutions' blocks (see conv_blocking; cpu_tuning.py picks them for the CPU it
    runs on). Any values compute the same convolution; they only move the speed."""
    global _winograd_block_floats, _implicit_block_floats
    values = {}
    for name, value, low, high in (("winograd", winograd, 1024, 1 << 24), ("implicit", implicit, 256, 1 << 22)):
        value = _int("set_conv_blocking", name, value)
        if not low <= value <= high:
            raise ValueError(f"set_conv_blocking: {name} must be in [{low}, {high}], got {value}")
        values[name] = value
    _winograd_block_floats, _implicit_block_floats = values["winograd"], values["implicit"]


def set_isa(name=None):
    """Run matmul and exp/log/tanh/max with the code for "avx512", "avx2" or "generic"; None picks the widest.

    All three compute the same function; choosing a narrower one is for
    testing every variant on one machine and for measuring what it buys.
    """
    global _gemm_index
    if name is None:
        name = nk_gemm_kernels[nk_gemm_best()].name.decode()
    for i in range(nk_gemm_nkernels):
        if nk_gemm_kernels[i].name.decode() == name:
            if not nk_gemm_supported(i) or not nk_vmath_select(name.encode()):
                raise ValueError(f"set_isa: this CPU cannot run the {name!r} kernels")
            _gemm_index = i
            return
    raise ValueError(f"set_isa: unknown instruction set {name!r}, expected one of {available_isas()}")


set_isa(None)
