"""CUDA C source for an element-wise program: a grid-stride loop, one thread per entry."""
from .c_source import kernel_name
from .program import c_body

_TEMPLATE = """\
/* generated from: {summary} */
extern "C" __global__ void {name}(float *__restrict__ out, {params}, long long n)
{{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {{
{body}
        out[i] = v{last};
    }}
}}
"""


def cuda_source(program, n_inputs):
    """(kernel name, CUDA source) of ``__global__ name(float *out, const float *a0, ..., long long n)``."""
    name = kernel_name(program, n_inputs, prefix="fused_cuda")
    params = ", ".join(f"const float *__restrict__ a{k}" for k in range(n_inputs))
    summary = " -> ".join(op for op, _, _ in program)
    return name, _TEMPLATE.format(name=name, params=params, body=c_body(program, " " * 8),
                                  last=len(program) - 1, summary=summary)
