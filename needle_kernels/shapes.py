"""Shape arithmetic shared by the NDArray and the ops: axes, reshape's -1, broadcasting.

Pure functions of tuples of ints, so the array (``backend_ndarray``) and the
Tensor ops (``ops``) follow one set of numpy rules and raise the same errors.
They run on every operation: the rules are written out with plain Python
(``math.prod``, tuple loops), which costs far less than numpy's helpers.
"""
import math
import numbers


def normalize_axes(axes, ndim, name):
    """``axes`` (None: all, an int, or a sequence) as a sorted tuple of distinct axes in [0, ndim).

    Negative axes count from the end; an axis out of range or repeated is a ValueError naming ``name``.
    """
    if axes is None:
        return tuple(range(ndim))
    seq = (axes,) if isinstance(axes, numbers.Integral) else tuple(axes)
    out = []
    for ax in seq:
        if not isinstance(ax, numbers.Integral) or not -ndim <= ax < ndim:
            raise ValueError(f"{name}: axis {ax} is out of range for an array of {ndim} dimensions")
        ax = int(ax) % ndim
        if ax in out:
            raise ValueError(f"{name}: axis {ax} repeated in {axes}")
        out.append(ax)
    return tuple(sorted(out))


def resolve_shape(shape, old_shape, name="reshape"):
    """``shape`` for an array of ``old_shape``, its one -1 (if any) inferred from the size."""
    size = math.prod(old_shape)
    shape = tuple(map(int, shape))  # (map, not a generator: every reshape comes through here)
    if -1 in shape:
        if shape.count(-1) > 1:
            raise ValueError(f"{name}: only one dimension can be -1 in {shape}")
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or size % known:
            raise ValueError(f"{name}: cannot reshape an array of shape {tuple(old_shape)} into shape {shape}")
        shape = tuple(size // known if n == -1 else n for n in shape)
    if math.prod(shape) != size or (shape and min(shape) < 0):
        raise ValueError(f"{name}: cannot reshape an array of shape {tuple(old_shape)} ({size} elements) "
                         f"into shape {shape}")
    return shape


def broadcast_shapes(*shapes, name=None):
    """numpy's broadcast of ``shapes``: aligned on the right, each axis 1 or the common size."""
    shapes = [tuple(s) for s in shapes]
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return shapes[0]
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s, ndim - len(s)):
            if n != 1:
                if out[i] not in (1, n):
                    prefix = f"{name}: " if name else ""
                    raise ValueError(f"{prefix}shapes {' and '.join(str(x) for x in shapes)} cannot be broadcast together")
                out[i] = n
    return tuple(out)


def broadcast_axes(shape, target):
    """The axes of ``target`` along which ``shape`` was repeated when broadcast to it.

    Summing an adjoint of shape ``target`` over them (and dropping the leading
    ones) gives back ``shape``: the adjoint of a broadcast is a sum, since
    every copy of an element sent its own contribution.
    """
    shape, target = tuple(shape), tuple(target)
    lead = len(target) - len(shape)
    return tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and target[i + lead] != 1)


def kept_shape(shape, axes):
    """``shape`` with the reduced ``axes`` kept as 1 (a reduction's keepdims shape)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))
