"""Reverse-mode automatic differentiation: Value, Op, Tensor and the backward pass.

A Tensor is a node of a computation graph: a leaf (data, no op) or the result
of an ``Op`` applied to input Tensors. Evaluation is eager (``LAZY_MODE`` is
False): a node computes its ``cached_data`` as soon as it is made. The
gradient of each op is written with ops too, so gradients are Tensors with a
graph of their own and can be differentiated again.
"""
from contextlib import contextmanager
import gc
from functools import reduce
import math
import operator

import numpy

from .backend_selection import (
    NDArray,
    array_api,
    default_device,
    device_of,
)

# Eager evaluation: realize every node when it is created. Lazy mode (build the
# graph, compute on demand) is kept as a switch for teaching.
LAZY_MODE = False

# False while a backward pass runs with create_graph=False: the ops it runs then record no
# graph (each result is a constant), so every adjoint can go as soon as it has been used.
RECORDING = True


def live_values():
    """The number of live Values (Tensors and TensorTuples), read as ``TENSOR_COUNTER``: tests
    use it to check that optimizers and training loops do not leak graph nodes.

    Counted when read, among the objects the garbage collector tracks, rather than kept by a
    ``__del__`` on every Value: a Python-level finalizer runs for every node of every graph,
    while the counter is read a few times per test."""
    return sum(1 for obj in gc.get_objects() if isinstance(obj, Value))


def __getattr__(name):
    if name == "TENSOR_COUNTER":
        return live_values()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _OpsOnFirstUse:
    """Stands for the ops package until an operator first needs it.

    The ops modules import this one at their top (for Tensor and TensorOp), so it cannot import
    them at its own. The first attribute read imports the package and puts it in this stand-in's
    place as the module's ``ops``: every operator call after that reads one global, where a
    cached function or an import statement per call would cost a call more.
    """

    def __getattr__(self, name):
        global ops
        from . import ops as package

        ops = package
        return getattr(package, name)


ops = _OpsOnFirstUse()


class Op:
    """An operator: ``compute`` on arrays, ``gradient`` on Tensors."""

    def __call__(self, *args):
        raise NotImplementedError()

    def compute(self, *args):
        """Compute the output from input arrays (NDArray, or numpy in np mode)."""
        raise NotImplementedError()

    def gradient(self, out_grad, node):
        """Partial adjoints ``out_grad * d node / d input_i`` for each input, as Tensors."""
        raise NotImplementedError()

    def gradient_as_tuple(self, out_grad, node):
        return _as_tuple(self.gradient(out_grad, node))


def _as_tuple(partials):
    """What ``Op.gradient`` returned (a tuple, a list or one adjoint) as a tuple."""
    if isinstance(partials, tuple):
        return partials
    if isinstance(partials, list):
        return tuple(partials)
    return (partials,)


class SavedForBackward:
    """What ``Op.compute`` returns to keep arrays for its gradient: the output and ``saved``.

    The node stores ``saved`` (as ``node.saved``) while it can still be
    differentiated, so an op keeps nothing on itself between its compute and
    its gradient, and a graph's intermediate arrays go when the graph goes.
    """

    __slots__ = ("output", "saved")

    def __init__(self, output, saved):
        self.output, self.saved = output, saved


class Value:
    """A node of the computation graph."""

    op: "Op | None"
    inputs: "tuple[Value, ...]"
    cached_data: object
    requires_grad: bool
    saved = None  # arrays the op kept for its gradient (see SavedForBackward)

    def realize_cached_data(self):
        """Compute (once) and return this node's array."""
        data = self.cached_data
        if data is not None:
            return data
        self._store(self.op.compute(*[x.realize_cached_data() for x in self.inputs]))
        return self.cached_data

    def _store(self, result):
        if type(result) is SavedForBackward:
            if self.requires_grad:
                self.saved = result.saved
            result = result.output
        self.cached_data = result

    def is_leaf(self):
        return self.op is None

    def _init(self, op, inputs, *, num_outputs=1, cached_data=None, requires_grad=None):
        if requires_grad is None:  # any(...), without a generator: this runs for every node
            requires_grad = False
            for x in inputs if RECORDING else ():
                if x.requires_grad:
                    requires_grad = True
                    break
        self.op = op
        self.inputs = tuple(inputs)
        self.num_outputs = num_outputs
        self.cached_data = cached_data
        self.requires_grad = requires_grad

    @classmethod
    def make_const(cls, data, *, requires_grad=False):
        """A leaf holding ``data`` as is (no copy)."""
        value = cls.__new__(cls)
        value._init(None, [], cached_data=data, requires_grad=requires_grad)
        return value

    @classmethod
    def make_from_op(cls, op, inputs):
        """The node ``op(*inputs)``, made as calling a TensorOp or TensorTupleOp makes it (for an
        op whose own ``__call__`` does more before it makes its node, as TupleGetItem's does)."""
        if op.output_type is not cls:
            raise TypeError(f"{cls.__name__}.make_from_op: a {type(op).__name__} makes a "
                            f"{op.output_type.__name__}")
        return TensorOp.__call__(op, *inputs)

    @classmethod
    def make_with_data(cls, op, inputs, data):
        """A node of ``op(*inputs)`` whose value ``data`` is already known.

        Used by gradients that reuse an array computed in the forward pass
        (e.g. the im2col matrix of a convolution) while staying differentiable.
        """
        value = cls.__new__(cls)
        value._init(op, inputs, cached_data=data)
        if not value.requires_grad:
            value.op = None
            value.inputs = ()
        return value


class TensorTuple(Value):
    """A tuple of Tensors that is itself a graph node (e.g. the output of ``split``)."""

    def __len__(self):
        return len(self.realize_cached_data())

    def __getitem__(self, index):
        from .ops.ops_tuple import tuple_get_item

        return tuple_get_item(self, index)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def tuple(self):
        return tuple(self)

    def __repr__(self):
        return "needle.TensorTuple" + str(self.tuple())

    def __str__(self):
        return self.__repr__()

    def __add__(self, other):
        from .ops.ops_tuple import make_tuple

        if not isinstance(other, TensorTuple) or len(self) != len(other):
            raise ValueError("TensorTuple + needs another TensorTuple of the same length")
        return make_tuple(*[self[i] + other[i] for i in range(len(self))])

    def detach(self):
        return TensorTuple.make_const(self.realize_cached_data())


class Tensor(Value):
    """An n-dimensional array (float32; numpy mode keeps a floating dtype) that records how it was computed."""

    grad = None  # set on leaves by backward()
    # numpy must defer to Tensor's reflected operators (np.float64(2) * t).
    __array_ufunc__ = None

    def __init__(self, array, device=None, dtype=None, requires_grad=True, **kwargs):
        """A leaf holding a copy of ``array`` (a Tensor's array is shared when nothing changes).

        The dtype is the array API's rule (``array_api.array``): NDArrays are
        float32, and a float64 numpy array is converted; with
        ``NEEDLE_BACKEND=np`` a floating numpy array keeps its dtype.
        """
        if isinstance(array, Tensor):
            device = array.device if device is None else device
            if device == array.device and (dtype is None or dtype == array.dtype):
                cached_data = array.realize_cached_data()
            else:
                cached_data = array_api.array(array.numpy(), dtype=array.dtype if dtype is None else dtype,
                                              device=device)
        else:
            if device is None:
                # an array stays where it is; anything else goes to the default device
                device = device_of(array) if isinstance(array, NDArray) else default_device()
            cached_data = array_api.array(array, dtype=dtype, device=device)
        self._init(None, [], cached_data=cached_data, requires_grad=requires_grad)

    @staticmethod
    def make_const(data, requires_grad=False):
        """A leaf Tensor around an array (an NDArray, numpy array in np mode, or a Tensor's data)."""
        tensor = Tensor.__new__(Tensor)
        if isinstance(data, Tensor):
            data = data.realize_cached_data()
        tensor._init(None, [], cached_data=data, requires_grad=requires_grad)
        return tensor

    @property
    def data(self):
        """The same array, as a new leaf Tensor with no history."""
        return self.detach()

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data must be set to a Tensor, got {type(value).__name__}")
        self.cached_data = value.realize_cached_data()

    def detach(self):
        """A new leaf Tensor sharing this one's array; gradients stop here."""
        return Tensor.make_const(self.realize_cached_data())

    @property
    def shape(self):
        data = self.cached_data
        shape = (data if data is not None else self.realize_cached_data()).shape
        return shape if type(shape) is tuple else tuple(shape)  # NDArray and numpy shapes already are

    @property
    def dtype(self):
        return self.realize_cached_data().dtype

    @property
    def device(self):
        return device_of(self.realize_cached_data())

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def numpy(self):
        # an NDArray converts itself (__array__); a numpy array is returned as is
        return numpy.asarray(self.realize_cached_data())

    def backward(self, out_grad=None, create_graph=True):
        """Compute ``.grad`` of every leaf that requires grad.

        ``out_grad`` is the adjoint of this Tensor. Left out, it is an all-ones
        array of this Tensor's shape (for any shape, not only scalars), as in
        needle: ``y.backward()`` then gives the gradient of ``y.sum()``.

        ``create_graph=True`` (needle's behaviour) builds the gradients from
        recorded ops, so they can be differentiated again. ``False`` (PyTorch's
        default) records nothing while the pass runs: the gradients are
        constants, and each intermediate adjoint is freed once it has been used,
        instead of living as long as the gradients do.
        """
        if out_grad is None:
            out_grad = Tensor.make_const(array_api.full(self.shape, 1.0, dtype=self.dtype, device=self.device))
        elif not isinstance(out_grad, Tensor):
            out_grad = Tensor(out_grad, device=self.device, requires_grad=False)
        if out_grad.shape != self.shape:
            raise ValueError(f"backward(): out_grad shape {out_grad.shape} != tensor shape {self.shape}")
        with recording(bool(create_graph) and RECORDING):
            compute_gradient_of_variables(self, out_grad)

    def __repr__(self):
        return "needle.Tensor(" + str(self.realize_cached_data()) + ")"

    def __str__(self):
        return str(self.realize_cached_data())

    # ---- operators: ``ops`` is the ops package (see _OpsOnFirstUse)
    def __add__(self, other):
        if isinstance(other, Tensor):
            return ops.add(self, other)
        return ops.add_scalar(self, other)

    def __mul__(self, other):
        if isinstance(other, Tensor):
            return ops.multiply(self, other)
        return ops.mul_scalar(self, other)

    def __pow__(self, other):
        if isinstance(other, Tensor):
            return ops.power(self, other)
        return ops.power_scalar(self, other)

    def __sub__(self, other):
        if isinstance(other, Tensor):
            return ops.add(self, ops.negate(other))
        return ops.add_scalar(self, -other)

    def __rsub__(self, other):
        return ops.add_scalar(ops.negate(self), other)

    def __truediv__(self, other):
        if isinstance(other, Tensor):
            return ops.divide(self, other)
        return ops.divide_scalar(self, other)

    def __rtruediv__(self, other):
        return ops.mul_scalar(ops.power_scalar(self, -1), other)

    def __matmul__(self, other):
        return ops.matmul(self, other)

    def __rmatmul__(self, other):
        return ops.matmul(other, self)

    def __neg__(self):
        return ops.negate(self)

    __radd__ = __add__
    __rmul__ = __mul__

    def sum(self, axes=None):
        return ops.summation(self, axes)

    def broadcast_to(self, shape):
        return ops.broadcast_to(self, shape)

    def reshape(self, shape):
        return ops.reshape(self, shape)

    def transpose(self, axes=None):
        return ops.transpose(self, axes)


class TensorOp(Op):
    """An op whose output is a Tensor."""

    output_type = Tensor

    def __call__(self, *inputs):
        """A new node of ``self`` on ``inputs``, its array computed now (eager mode).

        Every op of every forward and backward pass comes through here, so the steps are written
        out in this one frame rather than split into helpers (``_init``, ``_store``)."""
        value = self.output_type.__new__(self.output_type)
        requires_grad = False
        if RECORDING:
            for x in inputs:
                if x.requires_grad:
                    requires_grad = True
                    break
        value.num_outputs = 1
        value.requires_grad = requires_grad
        if LAZY_MODE:
            value.op, value.inputs, value.cached_data = self, inputs, None
            return value
        arrays = []
        for x in inputs:
            data = x.cached_data
            arrays.append(data if data is not None else x.realize_cached_data())
        result = self.compute(*arrays)
        if type(result) is SavedForBackward:
            if requires_grad:
                value.saved = result.saved
            result = result.output
        value.cached_data = result
        if requires_grad:
            value.op, value.inputs = self, inputs
        else:
            # Nothing will differentiate through it: no inputs, so the graph above
            # it can be freed (what detach() would do, without a second node).
            value.op, value.inputs = None, ()
        return value


class TensorTupleOp(Op):
    """An op whose output is a TensorTuple."""

    output_type = TensorTuple
    __call__ = TensorOp.__call__  # the same steps, making a TensorTuple


def compute_gradient_of_variables(output_tensor, out_grad):
    """Reverse-mode AD: set ``.grad`` on every leaf of ``output_tensor``'s graph.

    Nodes are visited in reverse topological order; a node's adjoint is the sum
    of the partial adjoints sent by the nodes that use it, so a value used
    twice accumulates both contributions. A TensorTuple's adjoint is the same
    sum taken slot by slot: a partial adjoint sent to a tuple adds each of its
    items to its slot; a ``TupleAdjoint`` names only the slots it touches (the
    others are zero), so reading k items of a split costs k adjoints, not k
    tuples of zeros, whichever op reads them.
    """
    from .ops.ops_tuple import MakeTuple  # here: the ops import this module

    # node -> its partial adjoints so far: the one Tensor most nodes get, a list once a second comes
    # (no list per node: a chain of tiny ops spends its backward pass on such bookkeeping)
    pending = {output_tensor: out_grad}
    tuple_slot_grads = {}  # TensorTuple -> {index: [adjoints]}
    # pop, not get: a node's partial adjoints are needed only until its own adjoint is summed
    for node in reversed(find_topo_sort([output_tensor])):
        grad = pending.pop(node, None)
        if type(node) is not Tensor and isinstance(node, TensorTuple):  # (the exact type first: it is cheaper)
            grad = _tuple_adjoint(node, _as_list(grad), tuple_slot_grads.pop(node, None))
        elif type(grad) is list:
            grad = sum_node_list(grad)
        if grad is None:
            continue
        if node.op is None:
            node.grad = grad
            continue
        partials = node.op.gradient(grad, node)  # (gradient_as_tuple written out: a call less per node)
        if type(partials) is not tuple:  # one Tensor, as a unary op's gradient is, else see _as_tuple
            partials = (partials,) if type(partials) is Tensor else _as_tuple(partials)
        for inp, partial in zip(node.inputs, partials):
            if partial is None or not inp.requires_grad:
                continue
            if type(inp) is not Tensor and isinstance(inp, TensorTuple):
                slots = tuple_slot_grads.setdefault(inp, {})
                if isinstance(partial, TupleAdjoint):
                    pairs = partial.items.items()
                else:  # a make_tuple's items are its inputs: read them without a node per item
                    pairs = enumerate(partial.inputs if isinstance(partial.op, MakeTuple) else list(partial))
                for i, item in pairs:
                    slots.setdefault(i, []).append(item)
                continue
            earlier = pending.get(inp)
            if earlier is None:
                pending[inp] = partial
            elif type(earlier) is list:
                earlier.append(partial)
            else:
                pending[inp] = [earlier, partial]
        # a partial sent nowhere (its input needs no gradient) goes now, not after the next node
        partials = partial = None


def _as_list(adjoints):
    """``pending``'s entry for a node (None, one adjoint or a list of them) as a list or None."""
    return adjoints if adjoints is None or type(adjoints) is list else [adjoints]


@contextmanager
def recording(flag):
    """Within, ops record their graph (``flag`` True) or make constants (False); see RECORDING."""
    global RECORDING
    saved, RECORDING = RECORDING, bool(flag)
    try:
        yield
    finally:
        RECORDING = saved


def zeros_adjoint(shape, dtype, device):
    """A constant zero Tensor of ``shape``: a broadcast view of one zero element (no memory of its own)."""
    zero = array_api.full((1,) * len(shape), 0.0, dtype=dtype, device=device)
    return Tensor.make_const(array_api.broadcast_to(zero, tuple(shape)))


class TupleAdjoint(TensorTuple):
    """The adjoint of the TensorTuple ``like`` given by the items of some slots,
    ``items = {index: Tensor}``; every other slot is zero.

    The backward pass adds only the given items to their slots. Read as an
    ordinary TensorTuple (indexing, iterating, ``+``, its data), the missing
    slots appear as ``zeros_adjoint`` views, made when first read.
    """

    def __init__(self, like, items):
        requires_grad = False  # a loop, not any(...): one of these is made per tuple item read
        for t in items.values():
            if t.requires_grad:
                requires_grad = True
                break
        self._init(None, (), requires_grad=requires_grad)
        self.like = like
        self.items = items

    def __len__(self):
        return len(self.like.realize_cached_data())

    def __getitem__(self, index):
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"TensorTuple index {index} out of range for a tuple of {n}")
        index %= n
        item = self.items.get(index)
        if item is None:
            x = self.like.realize_cached_data()[index]
            item = zeros_adjoint(tuple(x.shape), x.dtype, device_of(x))
        return item

    def realize_cached_data(self):
        if self.cached_data is None:
            self.cached_data = tuple(self[i].realize_cached_data() for i in range(len(self)))
        return self.cached_data

    def detach(self):
        return TensorTuple.make_const(self.realize_cached_data())


def _tuple_adjoint(node, whole_grads, slot_grads):
    """The adjoint of a TensorTuple from whole-tuple adjoints and per-slot ones."""
    from .ops.ops_tuple import make_tuple

    if not whole_grads and not slot_grads:
        return None
    slot_grads = slot_grads or {}
    items = []
    data = node.realize_cached_data()
    for i in range(len(data)):
        parts = list(slot_grads.get(i, []))
        parts.extend(g[i] for g in whole_grads or [])
        if parts:
            items.append(sum_node_list(parts))
        else:
            items.append(
                Tensor.make_const(array_api.full(tuple(data[i].shape), 0.0, dtype=data[i].dtype, device=device_of(data[i])))
            )
    return make_tuple(*items)


def find_topo_sort(node_list):
    """Nodes reachable from ``node_list`` in topological order (inputs before users)."""
    visited = set()
    topo_order = []
    for node in node_list:
        topo_sort_dfs(node, visited, topo_order)
    return topo_order


def topo_sort_dfs(node, visited, topo_order):
    """Post-order depth-first search appending to ``topo_order``.

    Iterative rather than recursive: an unrolled RNN or a long training graph
    is deeper than Python's recursion limit.
    """
    stack = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            topo_order.append(current)
            continue
        if current in visited:
            continue
        visited.add(current)
        stack.append((current, True))
        for inp in reversed(current.inputs):
            if inp not in visited:
                stack.append((inp, False))


def sum_node_list(node_list):
    """The sum of the Tensors (a single one is returned as is, no new node).

    Tensors of one shape, as a node's partial adjoints are, are summed by one
    ``add_n`` node; others with ``+`` (which broadcasts).
    """
    if len(node_list) == 1:
        return node_list[0]
    first = node_list[0]
    if type(first) is Tensor:
        shape = first.shape
        for t in node_list:  # (a loop rather than all(...): a weight's adjoint may have thousands)
            if type(t) is not Tensor or t.shape != shape:
                break
        else:
            return ops.add_n(*node_list)
    return reduce(operator.add, node_list)
