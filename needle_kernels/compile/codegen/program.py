"""Element-wise programs: what each step means, as numpy and as a C expression.

A program is a tuple of steps ``(op, args, scalar)``; ``args`` name the
kernel's inputs ``a<i>`` or earlier steps ``v<j>``; the last step is the
result. The numpy meaning below is the specification the generated kernels
are tested against; each C expression computes the same float32 math (the
sigmoid, like the op, as (tanh(x/2) + 1) / 2, which never overflows).
"""
import math

import numpy

BINARY = ("add", "mul", "div", "power")
SCALAR = ("add_scalar", "mul_scalar", "div_scalar", "power_scalar")
UNARY = ("neg", "relu", "tanh", "sigmoid", "exp", "log")

_NUMPY = {
    "add": lambda a, b, c: a + b,
    "mul": lambda a, b, c: a * b,
    "div": lambda a, b, c: a / b,
    "power": lambda a, b, c: numpy.exp(numpy.log(a) * b),
    "add_scalar": lambda a, c: a + c,
    "mul_scalar": lambda a, c: a * c,
    "div_scalar": lambda a, c: a / c,
    "power_scalar": lambda a, c: a ** c,
    "neg": lambda a, c: -a,
    "relu": lambda a, c: numpy.maximum(a, 0.0),
    "tanh": lambda a, c: numpy.tanh(a),
    "sigmoid": lambda a, c: (numpy.tanh(a * 0.5) + 1.0) * 0.5,
    "exp": lambda a, c: numpy.exp(a),
    "log": lambda a, c: numpy.log(a),
}

# C (and CUDA C) expressions; {0}, {1} are the arguments, {c} the scalar as a float literal
_C = {
    "add": "{0} + {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "power": "expf(logf({0}) * {1})",
    "add_scalar": "{0} + {c}",
    "mul_scalar": "{0} * {c}",
    "div_scalar": "{0} / {c}",
    "power_scalar": "powf({0}, {c})",
    "neg": "-{0}",
    "relu": "({0} < 0.0f ? 0.0f : {0})",  # NaN stays NaN, as numpy's maximum
    "tanh": "tanhf({0})",
    "sigmoid": "0.5f * (tanhf(0.5f * {0}) + 1.0f)",
    "exp": "expf({0})",
    "log": "logf({0})",
}


def validate_program(program, n_inputs):
    """Check every step's op and arguments; returns the program as a tuple of tuples."""
    steps = []
    for j, (op, args, scalar) in enumerate(program):
        arity = 2 if op in BINARY else 1
        if op not in _NUMPY or len(args) != arity:
            raise ValueError(f"step {j}: {op}{tuple(args)} is not an element-wise step")
        for name in args:
            kind, k = name[0], int(name[1:])
            if (kind == "a" and not 0 <= k < n_inputs) or (kind == "v" and not 0 <= k < j) or kind not in "av":
                raise ValueError(f"step {j}: argument {name!r} names no input or earlier step")
        if (op in SCALAR) != (scalar is not None):
            raise ValueError(f"step {j}: {op} {'needs' if op in SCALAR else 'takes no'} scalar")
        steps.append((op, tuple(args), scalar))
    if not steps:
        raise ValueError("an element-wise program needs at least one step")
    return tuple(steps)


def program_numpy(program, arrays):
    """Run ``program`` on numpy arrays, one numpy call per step (the reference)."""
    values = {}
    for j, (op, args, scalar) in enumerate(program):
        operands = [arrays[int(a[1:])] if a[0] == "a" else values[a] for a in args]
        values[f"v{j}"] = _NUMPY[op](*operands, scalar)
    return values[f"v{len(program) - 1}"]


def c_float(value):
    """A C float literal that reads back as the same float32."""
    value = float(numpy.float32(value))
    # written as divisions so the same text is valid C and NVRTC's CUDA C (no math.h macros there)
    if math.isnan(value):
        return "(0.0f / 0.0f)"
    if math.isinf(value):
        return "(1.0f / 0.0f)" if value > 0 else "(-1.0f / 0.0f)"
    return repr(value) + "f" if "e" in repr(value) or "." in repr(value) else repr(value) + ".0f"


def c_body(program, indent):
    """The statements computing ``v0 ... v<n-1>`` from ``a0[i] ...``, one line per step."""
    lines = []
    for j, (op, args, scalar) in enumerate(program):
        operands = [f"{a}[i]" if a[0] == "a" else a for a in args]
        expr = _C[op].format(*operands, c=None if scalar is None else c_float(scalar))
        lines.append(f"{indent}const float v{j} = {expr};")
    return "\n".join(lines)
