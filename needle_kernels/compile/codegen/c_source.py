"""C source for an element-wise program: one OpenMP loop over the entries."""
import hashlib

from .program import c_body

_TEMPLATE = """\
#include <math.h>

/* generated from: {summary} */
void {name}(float *restrict out, const float *const *ins, long n)
{{
{unpack}
    #pragma omp parallel for schedule(static) if (n > 32768)
    for (long i = 0; i < n; ++i) {{
{body}
        out[i] = v{last};
    }}
}}
"""


def kernel_name(program, n_inputs, prefix="fused"):
    digest = hashlib.sha256(repr((program, n_inputs)).encode()).hexdigest()[:16]
    return f"{prefix}_{digest}"


def c_source(program, n_inputs):
    """(kernel name, C source) of ``void name(float *out, const float *const *ins, long n)``."""
    name = kernel_name(program, n_inputs)
    unpack = "\n".join(f"    const float *restrict a{k} = ins[{k}];" for k in range(n_inputs))
    summary = " -> ".join(op for op, _, _ in program)
    source = _TEMPLATE.format(name=name, unpack=unpack, body=c_body(program, " " * 8),
                              last=len(program) - 1, summary=summary)
    return name, source
