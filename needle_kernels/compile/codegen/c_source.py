"""C source for an element-wise program, vectorized with the Cython backend's vector math.

exp, log and tanh come from the backend's own kernels header
(``ndarray_backend_cpu_kernels.h``, which includes its ``vmath`` polynomials):
libm's ``tanhf`` in a loop keeps gcc from vectorizing it, so a fused kernel
built on it loses to the backend's vectorized ops it replaces. The program is
written once per instruction set (baseline with 4-float vectors, AVX2+FMA
with 8, AVX-512 with 16, picked at run time as the backend does), applied to one chunk of
entries at a time; OpenMP splits the chunks across threads.
"""
import hashlib

from .program import c_float

_VECTOR = {
    "add": "{0} + {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "power": "nk_vexp_{s}(nk_vlog_{s}({0}) * {1})",
    "add_scalar": "{0} + {c}",
    "mul_scalar": "{0} * {c}",
    "div_scalar": "{0} / {c}",
    "neg": "-{0}",
    "relu": "nk_vsel_{s}({0} < 0.0f, ZERO, {0})",  # NaN stays NaN, as numpy's maximum
    "tanh": "nk_vtanh_{s}({0})",
    "sigmoid": "0.5f * (nk_vtanh_{s}(0.5f * {0}) + 1.0f)",
    "exp": "nk_vexp_{s}({0})",
    "log": "nk_vlog_{s}({0})",
}

# (suffix, attribute, floats per vector, guard)
_ISAS = [
    ("generic", "", 4, None),
    ("avx2", '__attribute__((target("avx2,fma")))', 8, "NK_VMATH_X86"),
    ("avx512", '__attribute__((target("avx512f,avx2,fma")))', 16, "NK_VMATH_X86"),
]

_CHUNK = 8192


def kernel_name(program, n_inputs, prefix="fused"):
    digest = hashlib.sha256(repr((program, n_inputs)).encode()).hexdigest()[:16]
    return f"{prefix}_{digest}"


def _power_scalar(x, c, s):
    if float(c).is_integer() and abs(c) <= 4:
        k = int(abs(c))
        if k == 0:
            return "(ZERO + 1.0f)"
        product = " * ".join([x] * k)
        return f"({product})" if c > 0 else f"(1.0f / ({product}))"
    return f"pow_lanes_{s}({x}, {c_float(c)})"


def _vector_body(program, s):
    lines = []
    for j, (op, args, scalar) in enumerate(program):
        operands = [f"x{a[1:]}" if a[0] == "a" else a for a in args]
        if op == "power_scalar":
            expr = _power_scalar(operands[0], scalar, s)
        else:
            expr = _VECTOR[op].format(*operands, s=s, c=None if scalar is None else c_float(scalar))
        lines.append(f"    const VF v{j} = {expr};")
    return "\n".join(lines)


def _isa_block(name, program, n_inputs, suffix, attr, width):
    vf = f"nk_vf_{suffix}"
    params = ", ".join(f"VF x{k}" for k in range(n_inputs))
    loads = "".join(f"        memcpy(&x{k}, ins[{k}] + i, bytes);\n" for k in range(n_inputs))
    args = ", ".join(f"x{k}" for k in range(n_inputs))
    decls = ", ".join(f"x{k}" for k in range(n_inputs))
    return f"""
#define VF {vf}
#define ZERO ((VF){{0}})
{attr} static inline VF pow_lanes_{suffix}(VF x, float c)
{{
    for (int l = 0; l < {width}; l++) x[l] = powf(x[l], c);
    return x;
}}

{attr} static inline VF {name}_step_{suffix}({params})
{{
{_vector_body(program, suffix)}
    return v{len(program) - 1};
}}

{attr} static void {name}_{suffix}(float *out, const float *const *ins, ptrdiff_t lo, ptrdiff_t hi)
{{
    VF {decls}, y;
    ptrdiff_t i = lo;
    /* whole vectors: memcpy of a constant size compiles to one unaligned load */
    for (; i + {width} <= hi; i += {width}) {{
{loads.replace("bytes", "sizeof(VF)")}        y = {name}_step_{suffix}({args});
        memcpy(out + i, &y, sizeof(VF));
    }}
    if (i < hi) {{  /* the tail: a vector of ones (log of 1 is safe) partly overwritten */
        size_t bytes = (size_t)(hi - i) * sizeof(float);
        {" ".join(f"x{k} = ZERO + 1.0f;" for k in range(n_inputs))}
{loads}        y = {name}_step_{suffix}({args});
        memcpy(out + i, &y, bytes);
    }}
}}
#undef ZERO
#undef VF
"""


def c_source(program, n_inputs):
    """(kernel name, C source) of ``void name(float *out, const float *const *ins, long n)``."""
    name = kernel_name(program, n_inputs)
    summary = " -> ".join(op for op, _, _ in program)
    parts = [f"/* generated from: {summary} */",
             '#include "ndarray_backend_cpu_kernels.h"',
             f"typedef void (*{name}_block)(float *, const float *const *, ptrdiff_t, ptrdiff_t);"]
    for suffix, attr, width, guard in _ISAS:
        block = _isa_block(name, program, n_inputs, suffix, attr, width)
        parts.append(f"#ifdef {guard}\n{block}\n#endif" if guard else block)
    parts.append(f"""
static {name}_block {name}_pick(void)
{{
#ifdef NK_VMATH_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return {name}_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {name}_avx2;
#endif
    return {name}_generic;
}}

void {name}(float *out, const float *const *ins, long n)
{{
    {name}_block block = {name}_pick();
    const ptrdiff_t chunks = (n + {_CHUNK} - 1) / {_CHUNK};
    #pragma omp parallel for schedule(static) if (chunks > 4)
    for (ptrdiff_t c = 0; c < chunks; c++) {{
        ptrdiff_t lo = c * {_CHUNK}, hi = lo + {_CHUNK} < n ? lo + {_CHUNK} : n;
        block(out, ins, lo, hi);
    }}
}}
""")
    return name, "\n".join(parts)
