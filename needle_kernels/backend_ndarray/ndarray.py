"""The strided NDArray.

An NDArray is a view: ``shape``, ``strides`` (in elements), ``offset`` into a
flat float32 ``Array`` owned by a backend module, and the ``device`` whose
kernels run on it. ``reshape``, ``permute``, ``broadcast_to``, ``flip``,
``as_strided`` and basic indexing only change those numbers (no copy);
``compact()`` copies a view into row-major order, which is what the
element-wise, reduction and matmul kernels expect. All the logic that is the
same for every backend lives here, once; the backends are flat tables of
kernels (see ``ndarray_backend_numpy.py``).
"""
import builtins
import functools
import math
import numbers
import operator

import numpy as np

from ..shapes import broadcast_shapes, kept_shape, normalize_axes, resolve_shape
from .device import BackendDevice, default_device


def prod(shape):
    return math.prod(shape)


@functools.lru_cache(maxsize=4096)
def compact_strides(shape):
    """Row-major strides (in elements) of a shape (cached: every new array asks)."""
    strides, stride = [], 1
    for n in reversed(shape):
        strides.append(stride)
        stride *= n
    return tuple(reversed(strides))


_PLAIN_SCALARS = (float, int)


def _as_matmul_operand(x):
    """``(array, transposed)`` for a 2-D matmul operand: x itself when compact; x when it is the
    transpose of a compact array (its buffer then holds x.T row-major, as backward passes make
    x.T); else a compact copy. The strides are compared first: this runs for every product."""
    rows, cols = x._shape
    if x._offset == 0 and x._handle.size == rows * cols:
        if x._strides == (cols, 1):
            return x, False
        if x._strides == (1, rows):
            return x, True
    return (x, False) if x.is_compact() else (x.compact(), False)


def _kernel_view(shape, strides):
    """Kernels index with at least one dimension: a 0-d array is one element."""
    return (shape, strides) if shape else ((1,), (0,))


def _check_dtype(dtype):
    # dtype=None means float32: other floating inputs (a float64 numpy array) are converted
    if dtype is None or dtype == "float32" or dtype is np.float32:
        return
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"NDArray supports dtype float32 only, got {dtype!r} "
                         "(leave dtype out to convert; NEEDLE_BACKEND=np keeps float64)")


class NDArray:
    """A strided view of a flat float32 buffer on a device."""

    __array_priority__ = 1000  # so numpy defers `np_array + ndarray` to our __radd__

    # needle calls it as a static method of the class (NDArray.compact_strides(shape))
    compact_strides = staticmethod(compact_strides)

    def __init__(self, other, device=None, dtype=None):
        _check_dtype(dtype)
        if isinstance(other, NDArray):  # always an independent copy, like numpy.array
            device = other.device if device is None else device
            self._init(other.copy() if device == other.device else other.to(device))
            return
        device = default_device() if device is None else device
        if not isinstance(device, BackendDevice):
            raise TypeError(f"device must be a BackendDevice such as cpu(), got {device!r}")
        device._require()
        arr = np.asarray(other.numpy() if hasattr(other, "numpy") and not isinstance(other, np.ndarray) else other)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise TypeError(f"cannot build an NDArray from {type(other).__name__} with dtype {arr.dtype}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        out = NDArray.make(arr.shape, device=device)
        device.from_numpy(arr, out._handle)
        self._init(out)

    def _init(self, other):
        self._shape = other._shape
        self._strides = other._strides
        self._offset = other._offset
        self._device = other._device
        self._handle = other._handle

    @staticmethod
    def _new(shape, device):
        """A fresh compact array; the hot path of every operation, so no argument checks."""
        array = object.__new__(NDArray)
        array._shape = shape
        array._strides = compact_strides(shape)
        array._offset = 0
        array._device = device
        array._csize = size = math.prod(shape)
        array._handle = device.Array(size)
        return array

    @staticmethod
    def _alias(shape, strides, device, handle, offset):
        """A view of an existing buffer with already-validated int tuples (no checks)."""
        array = object.__new__(NDArray)
        array._shape = shape
        array._strides = strides
        array._offset = offset
        array._device = device
        array._handle = handle
        return array

    @staticmethod
    def make(shape, strides=None, device=None, handle=None, offset=0):
        """An NDArray over ``handle`` (a new buffer of prod(shape) elements when None)."""
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        array = object.__new__(NDArray)
        array._shape = shape
        array._strides = compact_strides(shape) if strides is None else tuple(int(s) for s in strides)
        array._offset = int(offset)
        array._device = default_device() if device is None else device
        array._handle = array._device.Array(prod(shape)) if handle is None else handle
        return array

    # ------------------------------------------------------------ properties
    # Read-only views of the fields, read through C getters: a Python getter runs a frame of its
    # own on each read, and every operation reads its operands' shapes
    shape = property(operator.attrgetter("_shape"), doc="The tuple of dimensions.")
    strides = property(operator.attrgetter("_strides"), doc="The step, in elements, along each axis.")
    offset = property(operator.attrgetter("_offset"), doc="The index of the first element in the buffer.")
    device = property(operator.attrgetter("_device"), doc="The BackendDevice holding the buffer.")

    @property
    def dtype(self):
        return "float32"

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def size(self):
        return prod(self._shape)

    @property
    def flat(self):
        """A 1-D view of every element, in row-major order, sharing the buffer.

        Writes go through to this array, which is how needle's numerical
        gradient checks perturb an input in place: ``a.flat[j] += eps``. Only a
        contiguous array has such a view; any other would need a copy, and the
        writes would be lost, so it is an error.
        """
        if not self.is_contiguous():
            raise ValueError(f"flat: the array (shape {self._shape}, strides {self._strides}) is not "
                             "contiguous, so a 1-D view of it does not exist; call compact() first")
        return self.reshape((self.size,))

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]

    def __repr__(self):
        return f"NDArray({self.numpy().__str__()}, device={self.device})"

    def __str__(self):
        return self.numpy().__str__()

    # ------------------------------------------------------------ conversion
    def numpy(self):
        """A numpy copy of the elements."""
        shape, strides = _kernel_view(self._shape, self._strides)
        out = self.device.to_numpy(self._handle, shape, strides, self._offset)
        return out.reshape(self._shape)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def item(self):
        if self.size != 1:
            raise ValueError(f"item(): the array has {self.size} elements, not 1 (shape {self._shape})")
        return float(self.numpy().reshape(()))

    def __float__(self):
        return self.item()

    def __bool__(self):
        return bool(self.item())

    def to(self, device):
        """The same values on another device (self when already there)."""
        return self if device == self.device else NDArray(self.numpy(), device=device)

    def copy(self):
        out = NDArray._new(self._shape, self._device)
        self._copy_into(out)
        return out

    def astype(self, dtype="float32"):
        _check_dtype(dtype)
        return self.copy()

    def fill(self, value):
        """Set every element (of the whole buffer when compact, else of the view) to value."""
        if self.is_compact():
            self.device.fill(self._handle, value)
        else:
            self[...] = value

    # ------------------------------------------------------------ layout
    def is_contiguous(self):
        """Row-major strides (dimensions of size 1 may have any stride)."""
        expect = compact_strides(self._shape)
        if self._strides == expect:
            return True
        for n, s, c in zip(self._shape, self._strides, expect):  # (a loop: this runs for every reshape)
            if n != 1 and s != c:
                return False
        return True

    def is_compact(self):
        """Row-major, offset 0 and covering the whole buffer: what kernels take as input."""
        return self._offset == 0 and self._handle.size == math.prod(self._shape) and self.is_contiguous()

    def _is_dense(self):
        """Whether this view holds every element of its buffer once, from offset 0, in some
        axis order (a transpose of a compact array, such as an NCHW view of NHWC memory).
        Element-wise kernels run over such a buffer as it lies, and their result takes the
        same strides, as numpy's and PyTorch's do, instead of a transposed copy first."""
        if self._offset != 0 or self._handle.size != math.prod(self._shape):
            return False
        expect = 1
        for stride, n in sorted(zip(self._strides, self._shape)):
            if n != 1:
                if stride != expect:
                    return False
                expect *= n
        return True

    def _empty_like_dense(self):
        """A new buffer in this dense view's layout (see _is_dense)."""
        return NDArray._alias(self._shape, self._strides, self._device, self._device.Array(self._handle.size), 0)

    def _transposed_dense(self):
        """Whether this is a dense view in an axis order other than row-major (see _is_dense);
        a unit last stride rules that out cheaply for the usual compact array."""
        return bool(self._strides) and self._strides[-1] != 1 and self._is_dense()

    def _pair_layout(self, other):
        """For an element-wise kernel over this view and ``other`` (same shape): the dense
        transposed view whose layout both are read in and the result takes, or None (both
        row-major). Such a layout is kept when both share it, or when the other operand is
        not row-major either, so it needs a copy whichever order that copy is made in: an
        NCHW gradient with an NHWC-memory activation stays NHWC, instead of both being
        copied to NCHW and back again for the next layer."""
        if self._transposed_dense():
            if (other._strides == self._strides and other._is_dense()) or not other.is_contiguous():
                return self
        elif other._transposed_dense() and not self.is_contiguous():
            return other
        return None

    def _memory_order(self):
        """The axes from outermost to innermost in memory (those of length 1 first: their strides
        place nothing): a dense view permuted so is row-major."""
        return sorted(range(len(self._shape)), key=lambda ax: (self._shape[ax] != 1, -self._strides[ax]))

    def _in_layout_of(self, ref):
        """This view's values in the dense layout of ``ref`` (same shape): itself when it is
        already laid out so, else a copy in that layout."""
        if self._strides == ref._strides and self._is_dense():
            return self
        out = ref._empty_like_dense()
        order = ref._memory_order()
        self.permute(order)._copy_into(out.permute(order))  # out's buffer is row-major in that order
        return out

    def _copy_into(self, out):
        shape, strides = _kernel_view(self._shape, self._strides)
        self.device.compact(self._handle, out._handle, shape, strides, self._offset)

    def compact(self):
        """self when already compact, else a row-major copy."""
        # the arrays operations create are compact with exactly these strides: test that first, cheaply
        if self._compact_size() >= 0:
            return self
        if self.is_compact():
            return self
        return self.copy()

    def as_strided(self, shape, strides):
        """A view with the given shape and element strides at the same offset (bounds are checked)."""
        shape, strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
        if len(shape) != len(strides):
            raise ValueError(f"as_strided: shape {shape} and strides {strides} differ in length")
        if prod(shape):
            lo = self._offset + builtins.sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
            hi = self._offset + builtins.sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
            if lo < 0 or hi >= self._handle.size:
                raise ValueError(
                    f"as_strided: shape {shape} strides {strides} offset {self._offset} "
                    f"reaches outside a buffer of {self._handle.size} elements"
                )
        return NDArray._alias(shape, strides, self._device, self._handle, self._offset)

    def reshape(self, *shape):
        """A view with a new shape (one -1 is inferred); copies first only if the view is not contiguous."""
        if len(shape) == 1 and type(shape[0]) is not int and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        shape = resolve_shape(shape, self._shape)
        src = self if self.is_contiguous() else self.compact()
        return NDArray._alias(shape, compact_strides(shape), self._device, src._handle, src._offset)

    def permute(self, new_axes):
        """A view with the axes reordered: result.shape[i] == self.shape[new_axes[i]]."""
        nd = len(self._shape)
        axes = tuple(map(int, new_axes))
        if sorted(axes) != list(range(nd)):  # negative axes count from the end
            axes = tuple(a % builtins.max(nd, 1) for a in axes)
            if sorted(axes) != list(range(nd)):
                raise ValueError(f"permute: {axes} is not a permutation of the axes of shape {self._shape}")
        shape, strides = self._shape, self._strides
        return NDArray._alias(tuple([shape[a] for a in axes]), tuple([strides[a] for a in axes]),
                              self._device, self._handle, self._offset)

    def broadcast_to(self, *new_shape):
        """A view repeating size-1 axes with stride 0 (numpy rules; leading axes may be added)."""
        if len(new_shape) == 1 and not isinstance(new_shape[0], numbers.Integral):
            new_shape = new_shape[0]
        new_shape = tuple(int(n) for n in new_shape)
        extra = len(new_shape) - self.ndim
        if extra < 0:
            raise ValueError(f"broadcast_to: cannot broadcast shape {self._shape} to {new_shape}")
        shape = (1,) * extra + self._shape
        strides = (0,) * extra + self._strides
        out_strides = []
        for n, m, s in zip(shape, new_shape, strides):
            if n == m:
                out_strides.append(s if n != 1 else 0)
            elif n == 1:
                out_strides.append(0)
            else:
                raise ValueError(f"broadcast_to: cannot broadcast shape {self._shape} to {new_shape}")
        return NDArray._alias(new_shape, tuple(out_strides), self._device, self._handle, self._offset)

    def flip(self, axes=None):
        """A view with the order of elements reversed along axes (negative strides, no copy)."""
        axes = normalize_axes(axes, self.ndim, "flip")
        offset, strides = self._offset, list(self._strides)
        for ax in axes:
            if self._shape[ax] > 0:
                offset += (self._shape[ax] - 1) * strides[ax]
            strides[ax] = -strides[ax]
        return NDArray._alias(self._shape, tuple(strides), self._device, self._handle, offset)

    def pad(self, axes):
        """A zero-padded copy: axes is ((lo, hi), ...) per dimension, like numpy.pad's pad_width."""
        axes = tuple(tuple(int(x) for x in p) for p in axes)
        if len(axes) != self.ndim or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in axes):
            raise ValueError(f"pad: need one (lo, hi) pair of non-negative ints per axis of shape {self._shape}, got {axes}")
        out = NDArray._new(tuple([n + lo + hi for n, (lo, hi) in zip(self._shape, axes)]), self._device)
        self._device.fill(out._handle, 0.0)
        # the interior, this array's place in out: a view made directly (what out[lo:lo + n, ...] gives)
        interior = NDArray._alias(self._shape, out._strides, self._device, out._handle,
                                  builtins.sum(lo * st for (lo, _), st in zip(axes, out._strides)))
        src = self
        if self._transposed_dense():
            # read as it lies (an NCHW batch seen as NHWC, say): both views in its memory order, so
            # its buffer is the compact source of one copy, instead of a transposed copy first
            order = self._memory_order()
            src, interior = self.permute(order), interior.permute(order)
        kshape, kstrides = _kernel_view(interior._shape, interior._strides)
        self._device.ewise_setitem(src.compact()._handle, out._handle, kshape, kstrides, interior._offset)
        return out

    # ------------------------------------------------------------ indexing
    def process_slice(self, sl, dim):
        """``sl`` applied to axis ``dim`` as ``slice(start, stop, step)`` of explicit ints.

        Negative and missing bounds are resolved and clamped as numpy does
        (``slice.indices``), so ``range(start, stop, step)`` lists the indices
        selected; with a negative step that reaches index 0, ``stop`` is -1.
        ``__getitem__`` goes through this method, so a subclass may override it.
        """
        return slice(*sl.indices(self._shape[dim]))

    def _view(self, idxs):
        if not isinstance(idxs, tuple):
            idxs = (idxs,)
        if builtins.sum(1 for i in idxs if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis")
        n_real = builtins.sum(1 for i in idxs if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"too many indices ({n_real}) for an array of shape {self._shape}")
        expanded = []
        for i in idxs:
            if i is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - n_real))
            else:
                expanded.append(i)
        if Ellipsis not in idxs:
            expanded.extend([slice(None)] * (self.ndim - n_real))
        shape, strides, offset, dim = [], [], self._offset, 0
        for i in expanded:
            if i is None:
                shape.append(1)
                strides.append(0)
                continue
            n, s = self._shape[dim], self._strides[dim]
            if isinstance(i, slice):
                sl = self.process_slice(i, dim)
                start, stop, step = sl.start, sl.stop, sl.step
                length = len(range(start, stop, step))
                if length:
                    offset += start * s
                shape.append(length)
                strides.append(s * step)
            elif isinstance(i, numbers.Integral):
                if not -n <= i < n:
                    raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
                offset += (int(i) % n) * s
            else:
                raise IndexError(f"NDArray indices must be ints, slices, None or ..., got {type(i).__name__}")
            dim += 1
        return NDArray._alias(tuple(shape), tuple(strides), self._device, self._handle, offset)

    def __getitem__(self, idxs):
        return self._view(idxs)

    def __setitem__(self, idxs, other):
        view = self._view(idxs)
        kshape, kstrides = _kernel_view(view._shape, view._strides)
        if isinstance(other, numbers.Real):
            self.device.scalar_setitem(view.size, float(other), self._handle, kshape, kstrides, view._offset)
            return
        other = self._coerce(other)
        if other.shape != view.shape:
            try:
                other = other.broadcast_to(view.shape)
            except ValueError:
                raise ValueError(f"setitem: cannot assign an array of shape {other.shape} to a view of shape {view.shape}") from None
        # A source in the same buffer could be overwritten while it is read: copy it first.
        src = other.copy() if other._handle is self._handle else other.compact()
        self.device.ewise_setitem(src._handle, self._handle, kshape, kstrides, view._offset)

    # ------------------------------------------------------------ element-wise
    def _coerce(self, other):
        if isinstance(other, NDArray):
            if other.device != self.device:
                raise ValueError(f"arrays are on different devices: {self.device} and {other.device}")
            return other
        return NDArray(np.asarray(other, dtype=np.float32), device=self.device)

    def ewise_or_scalar(self, other, ewise_func, scalar_func):
        """``ewise_func(a, b, out)`` when ``other`` is an array (both broadcast to a common
        shape), else ``scalar_func(a, float(other), out)``, on compact handles; returns ``out``.

        The kernels are functions of the device's table (``self.device.ewise_add``,
        as needle passes them) or their names (``"ewise_add"``).
        """
        return self._ewise_or_scalar(other, ewise_func, scalar_func)

    # _compact_size's answer, once known: an array's layout never changes after it is made
    _csize = None

    def _compact_size(self):
        """The element count of this array when it is compact with exactly row-major strides (as
        every array an operation makes is), else -1: the test compact() and every element-wise
        operation start with, in one call (is_compact also takes any stride on an axis of 1)."""
        size = self._csize
        if size is None:
            size = self._handle.size
            if not (self._offset == 0 and self._strides == compact_strides(self._shape)
                    and size == math.prod(self._shape)):
                size = -1
            self._csize = size
        return size

    def _like_compact(self, size):
        """A new compact array of this array's shape and ``size`` elements (``_new`` with both known)."""
        out = object.__new__(NDArray)
        out._shape, out._strides, out._offset = self._shape, self._strides, 0
        out._device = dev = self._device
        out._handle = dev.Array(size)
        out._csize = size
        return out

    def _ewise_or_scalar(self, other, ewise, scalar):
        dev = self._device
        # the usual operands first, straight to the kernel: a compact array and a compact array of
        # its shape on its device, or a plain number (the general path costs a microsecond more)
        # (_csize read first: every array an operation makes has it, and a call costs a frame)
        size = self._csize
        if size is None:
            size = self._compact_size()
        if size >= 0:
            if type(other) is NDArray:
                if other._shape == self._shape and other._device is dev and (
                        other._csize == size or other._csize is None and other._compact_size() == size):
                    out = self._like_compact(size)
                    (getattr(dev, ewise) if type(ewise) is str else ewise)(self._handle, other._handle, out._handle)
                    return out
            elif type(other) is float or type(other) is int:
                out = self._like_compact(size)
                (getattr(dev, scalar) if type(scalar) is str else scalar)(self._handle, float(other), out._handle)
                return out
        # exact float/int first: the numbers.Real ABC check costs more than many kernels
        if type(other) in _PLAIN_SCALARS or (type(other) is not NDArray and isinstance(other, numbers.Real)):
            if self._strides and self._strides[-1] != 1 and self._is_dense():  # see _unary
                src, out = self, self._empty_like_dense()
            else:
                src, out = self.compact(), NDArray._new(self._shape, dev)
            (getattr(dev, scalar) if type(scalar) is str else scalar)(src._handle, float(other), out._handle)
            return out
        if type(other) is not NDArray or other._device is not dev:
            other = self._coerce(other)
        if other._shape == self._shape:
            layout = self._pair_layout(other)
            if layout is not None:  # a dense transposed layout: the kernel runs over the buffers
                a, b, out = self._in_layout_of(layout), other._in_layout_of(layout), layout._empty_like_dense()
                (getattr(dev, ewise) if type(ewise) is str else ewise)(a._handle, b._handle, out._handle)
                return out
            a, b, out_shape = self, other, self._shape
        else:
            out_shape = broadcast_shapes(self._shape, other._shape)
            a = self if self._shape == out_shape else self.broadcast_to(out_shape)
            b = other if other._shape == out_shape else other.broadcast_to(out_shape)
        out = NDArray._new(out_shape, dev)
        (getattr(dev, ewise) if type(ewise) is str else ewise)(a.compact()._handle, b.compact()._handle, out._handle)
        return out

    def _unary(self, kernel):
        size = self._csize  # (as in _ewise_or_scalar)
        if size is None:
            size = self._compact_size()
        if size >= 0:  # the usual input, straight to the kernel
            out = self._like_compact(size)
            getattr(self._device, kernel)(self._handle, out._handle)
            return out
        # a dense transposed array is read as it lies and the result takes its strides (see
        # _is_dense); a unit last stride rules that layout out cheaply for the usual compact input
        if self._strides and self._strides[-1] != 1 and self._is_dense():
            src, out = self, self._empty_like_dense()
        else:
            src, out = self.compact(), NDArray._new(self._shape, self._device)
        getattr(self._device, kernel)(src._handle, out._handle)
        return out

    def __add__(self, other):
        return self._ewise_or_scalar(other, "ewise_add", "scalar_add")

    __radd__ = __add__

    def __mul__(self, other):
        return self._ewise_or_scalar(other, "ewise_mul", "scalar_mul")

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._ewise_or_scalar(other, "ewise_div", "scalar_div")

    def __rtruediv__(self, other):
        if isinstance(other, numbers.Real):
            return NDArray.make(self._shape, device=self.device)._filled(other)._ewise_or_scalar(self, "ewise_div", "scalar_div")
        return self._coerce(other) / self

    def __neg__(self):
        return self * -1.0

    def __iadd__(self, other):
        """``self += other`` in place, as numpy: ``other`` broadcasts to this array's shape."""
        dev = self._device
        # (_compact_size first: the exact row-major layout every operation makes, cached per array;
        # is_compact() recomputes a product and a stride walk, for each adjoint add_n sums)
        if type(other) is NDArray and other._device is dev and other._shape == self._shape and (
                self._compact_size() >= 0 or self.is_compact()):
            # element-wise kernels read a[i] before they write out[i], so out may be a
            dev.ewise_add(self._handle, other.compact()._handle, self._handle)
            return self
        total = self + other
        if total._shape != self._shape:
            raise ValueError(f"+=: cannot add shape {total._shape} into an array of shape {self._shape}")
        self[...] = total
        return self

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __pow__(self, other):
        if not isinstance(other, numbers.Real):
            raise TypeError(f"NDArray ** supports a real scalar exponent, got {type(other).__name__}")
        return self._ewise_or_scalar(other, None, "scalar_power")

    def _filled(self, value):
        self.fill(value)
        return self

    def maximum(self, other):
        return self._ewise_or_scalar(other, "ewise_maximum", "scalar_maximum")

    # Comparisons return 0.0/1.0 floats. Only == and >= are kernels; the rest derive from them.
    def __eq__(self, other):
        return self._ewise_or_scalar(other, "ewise_eq", "scalar_eq")

    def __ge__(self, other):
        return self._ewise_or_scalar(other, "ewise_ge", "scalar_ge")

    def __ne__(self, other):
        return 1.0 - (self == other)

    def __le__(self, other):
        if isinstance(other, numbers.Real):
            return (-self) >= -other
        return self._coerce(other) >= self

    def __gt__(self, other):
        return 1.0 - (self <= other)

    def __lt__(self, other):
        return 1.0 - (self >= other)

    __hash__ = None  # == is element-wise

    def log(self):
        return self._unary("ewise_log")

    def exp(self):
        return self._unary("ewise_exp")

    def tanh(self):
        return self._unary("ewise_tanh")

    # ------------------------------------------------------------ matmul
    def __matmul__(self, other):
        """numpy matmul semantics: 2-D, 1-D promotion, batched with broadcast leading axes."""
        if (type(other) is NDArray and len(self._shape) == 2 and len(other._shape) == 2
                and self._shape[1] == other._shape[0] and other._device is self._device):
            return self._matmul_2d(other)  # the usual product: no promotion, no batch
        other = self._coerce(other)
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"matmul: operands must have at least one dimension, got shapes {a.shape} and {b.shape}")
        squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
        if squeeze_a:
            a = a.reshape(1, a.shape[0])
        if squeeze_b:
            b = b.reshape(b.shape[0], 1)
        m, n = a.shape[-2:]
        n2, p = b.shape[-2:]
        if n != n2:
            raise ValueError(f"matmul: shapes {self.shape} and {other.shape} are not aligned ({n} != {n2})")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out = self._matmul(a, b, batch, m, n, p)
        if squeeze_a:
            out = out.reshape(out.shape[:-2] + (p,))
        if squeeze_b:
            out = out.reshape(out.shape[:-1])
        return out

    def _matmul_2d(self, b):
        """self (m, n) @ b (n, p) on one device. A transposed view (x.T of a row-major x, as
        backward passes make) goes to the kernel as it is where the device has ``matmul_t``,
        instead of a transposed copy first."""
        (m, n), p = self._shape, b._shape[1]
        dev = self._device
        (a2, ta), (b2, tb) = _as_matmul_operand(self), _as_matmul_operand(b)
        out = NDArray._new((m, p), dev)
        if not (ta or tb):
            dev.matmul(a2._handle, b2._handle, out._handle, m, n, p)
        elif hasattr(dev, "matmul_t"):
            dev.matmul_t(a2._handle, b2._handle, out._handle, m, n, p, ta, tb)
        else:
            a2, b2 = a2.compact() if ta else a2, b2.compact() if tb else b2
            dev.matmul(a2._handle, b2._handle, out._handle, m, n, p)
        return out

    def _matmul(self, a, b, batch, m, n, p):
        dev = self.device
        nb = prod(batch)
        if nb == 1 and a.ndim == 2 and b.ndim == 2:
            return a._matmul_2d(b)
        if b.ndim == 2 and a.shape[:-2] == batch:
            # (..., m, n) @ (n, p): fold the batch into the rows, one GEMM.
            a2 = a.compact()
            out = NDArray._new(batch + (m, p), dev)
            dev.matmul(a2._handle, b.compact()._handle, out._handle, nb * m, n, p)
            return out
        a_b = a.broadcast_to(batch + (m, n)).compact()
        b_b = b.broadcast_to(batch + (n, p)).compact()
        out = NDArray._new(batch + (m, p), dev)
        if nb == 1:
            dev.matmul(a_b._handle, b_b._handle, out._handle, m, n, p)
        else:
            dev.matmul_batched(a_b._handle, b_b._handle, out._handle, nb, m, n, p)
        return out

    def __rmatmul__(self, other):
        return self._coerce(other) @ self

    # ------------------------------------------------------------ reductions
    def reduce_view_out(self, axis, keepdims=False):
        """``(view, out)`` set up for a reduction kernel, as needle's NDArray gives them.

        ``view`` holds the elements reduced into each output element
        contiguously along its last axis (``view.shape[-1]`` is the reduce
        size: the reduced axes are permuted last, and merged by a copy when
        there are several); ``out`` is a new array of the result's shape (0-d
        for ``axis=None`` without keepdims, as ``sum`` returns). So
        ``dev.reduce_sum(view.compact()._handle, out._handle, view.shape[-1])``
        is the sum.
        """
        if isinstance(axis, (tuple, list)) and not axis:
            raise ValueError("reduce_view_out: empty axis tuple")
        axes = normalize_axes(axis, self.ndim, "reduce_view_out")
        kept = tuple(i for i in range(self.ndim) if i not in axes)
        view = self.permute(kept + axes)
        if len(axes) != 1:
            view = view.compact().reshape(tuple(self._shape[i] for i in kept) + (prod(self._shape[i] for i in axes),))
        out_shape = kept_shape(self._shape, axes) if keepdims else \
            tuple(self._shape[i] for i in kept)
        return view, NDArray.make(out_shape, device=self._device)

    def _reduce(self, axis, keepdims, kernel):
        axes = normalize_axes(axis, self.ndim, kernel)
        out_shape_keep = kept_shape(self._shape, axes)
        out_shape = out_shape_keep if keepdims else tuple(n for i, n in enumerate(self._shape) if i not in axes)
        reduce_size = prod(self._shape[i] for i in axes)
        dev = self.device
        if reduce_size == 0:
            if kernel == "max":
                raise ValueError(f"max: zero-size reduction over axes {axes} of shape {self._shape}")
            out = NDArray._new(out_shape, dev)
            out.fill(0.0)
            return out
        out = NDArray._new(out_shape, dev)
        if out.size == 0:
            return out
        if axes and self._transposed_dense():
            result = self._reduce_in_memory_order(axes, out_shape, kernel)
            if result is not None:
                return result
        contiguous_block = axes == tuple(range(axes[0], axes[-1] + 1)) if axes else True
        if not axes:
            self._copy_into(out)
        elif contiguous_block:
            # Reduce a middle block in place: (outer, reduce, inner) needs no transposed copy.
            outer = prod(self._shape[: axes[0]])
            inner = prod(self._shape[axes[-1] + 1:])
            src = self.compact()
            if inner == 1:
                getattr(dev, f"reduce_{kernel}")(src._handle, out._handle, reduce_size)
            else:
                getattr(dev, f"reduce_{kernel}_axis")(src._handle, out._handle, outer, reduce_size, inner)
        else:
            # Several separate blocks of axes (e.g. N, H, W of NCHW): reduce one block at a
            # time, the last first, each in place; no transposed copy of the whole array.
            runs = [[axes[0]]]
            for ax in axes[1:]:
                if ax == runs[-1][-1] + 1:
                    runs[-1].append(ax)
                else:
                    runs.append([ax])
            part = self
            for run in reversed(runs):
                part = part._reduce(tuple(run), True, kernel)
            # part is compact with out's elements in out's order: a view of it is the result
            return NDArray._alias(out_shape, compact_strides(out_shape), dev, part._handle, 0)
        return out

    def _reduce_in_memory_order(self, axes, out_shape, kernel):
        """The reduction over ``axes`` of a dense view in another axis order (an NCHW batch seen
        as NHWC, say): the same reduction of its buffer in memory order, where it is compact, so
        no transposed copy of the whole array is made; only the result, when its axes lie in
        another order in memory, is copied into the view's order. None where the copy is the
        faster way: when the reduced axes fall into several blocks in memory and the last of
        them is rows of fewer than 32 (a 2x2 or 4x4 map's pixels), which reduce slower than
        the copy that makes them columns (bench_backend.py's "seen as NHWC .sum" rows)."""
        order = self._memory_order()
        shape = tuple(self._shape[ax] for ax in order)
        reduced_axes = tuple(i for i, ax in enumerate(order) if ax in axes)
        several_blocks = reduced_axes != tuple(range(reduced_axes[0], reduced_axes[-1] + 1))
        if several_blocks and reduced_axes[-1] == self.ndim - 1:
            first = self.ndim - 1  # the first axis of the block the reduced axes end with
            while first - 1 in reduced_axes:
                first -= 1
            if prod(shape[first:]) < 32:
                return None
        in_memory = NDArray._alias(shape, compact_strides(shape), self._device, self._handle, 0)
        reduced = in_memory._reduce(reduced_axes, False, kernel)
        # reduced's axes are the kept ones in memory order: put them back in the view's order
        kept = [ax for ax in order if ax not in axes]
        result = reduced.permute(tuple(sorted(range(len(kept)), key=lambda i: kept[i])))
        return result.compact().reshape(out_shape)

    def sum(self, axis=None, keepdims=False):
        """Sum over an axis, a tuple of axes, or all (axis=None, giving a 0-d array)."""
        return self._reduce(axis, keepdims, "sum")

    def max(self, axis=None, keepdims=False):
        """Maximum over an axis, a tuple of axes, or all."""
        return self._reduce(axis, keepdims, "max")

    # ------------------------------------------------------------ tiled matmul (lecture 11)
    def matmul_tiled(self, other):
        """2-D matmul through the backend's tiled-layout kernel (sizes multiples of __tile_size__)."""
        t = self.device.__tile_size__
        m, n = self.shape
        n2, p = other.shape
        if n != n2:
            raise ValueError(f"matmul_tiled: shapes {self.shape} and {other.shape} are not aligned")
        if m % t or n % t or p % t:
            raise ValueError(f"matmul_tiled: dimensions {m}, {n}, {p} must be multiples of the tile size {t}")

        def tile(x, r, c):
            return x.as_strided((r // t, c // t, t, t), (c * t, t, c, 1)).compact()

        out = NDArray.make((m // t, p // t, t, t), device=self.device)
        self.device.matmul_tiled(tile(self.compact(), m, n)._handle, tile(other.compact(), n, p)._handle, out._handle, m, n, p)
        return out.permute((0, 2, 1, 3)).compact().reshape(m, p)


