"""Integer class labels: checked once, here, for every one-hot, cross-entropy and embedding kernel.

``one_hot_rows`` writes n-wide zero rows and one 1 per row: ``numpy.eye(n)[labels]``
would first build the whole identity, 400 MB for a 10,000-word vocabulary, on
every call.
"""
import numpy


def label_error(name, value, n):
    """The ValueError for a label that cannot index a row of n classes."""
    return ValueError(f"{name}: label {value!r} is not an integer in [0, {n})")


def class_indices(labels, n, name="one_hot"):
    """``labels`` (any shape; integers, or integer-valued floats as an Array holds them) as int64
    indices; a ValueError naming the first label that is not an integer in [0, n)."""
    labels = numpy.asarray(labels)
    if labels.dtype.kind not in "fiub":
        raise ValueError(f"{name}: labels must be integers, got dtype {labels.dtype}")
    if labels.dtype.kind == "f":
        bad = ~((labels >= 0) & (labels < n) & (labels == numpy.floor(labels)))
    else:
        bad = (labels < 0) | (labels >= n)
    if bad.any():
        raise label_error(name, labels[bad].flat[0].item(), n)
    return labels.astype(numpy.int64)


def one_hot_rows(n, labels, dtype="float32"):
    """A numpy array of shape ``labels.shape + (n,)``: 1 at each label's column, 0 elsewhere."""
    labels = class_indices(labels, n)
    out = numpy.zeros(labels.shape + (int(n),), dtype=dtype)
    out.reshape(-1, int(n))[numpy.arange(labels.size), labels.reshape(-1)] = 1
    return out


def scatter_rows(g, ids, num_rows):
    """A numpy array (num_rows, D) whose row n is the sum of the rows g[r] (g: (R, D)) with
    ids[r] == n (int64 ids (R,)): an embedding's gradient, one_hot(ids)^T @ g.

    np.add.at works one element at a time: on rows sorted stably by id it gets only the repeats
    of a batch of mostly distinct ids (words), after each id's first row, in the order it alone
    would add them (each row's sum in the order of r, as the native kernels add); ids mostly
    repeated (positions) are summed a run of rows at a time by reduceat (whose rounding may
    differ in the last bit).
    """
    out = numpy.zeros((int(num_rows), g.shape[1]), dtype=g.dtype)
    if ids.size:
        order = numpy.argsort(ids, kind="stable")
        ids, rows = ids[order], g[order]
        first = numpy.ones(ids.size, dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        distinct = ids[first]
        if 2 * distinct.size < ids.size:
            out[distinct] = numpy.add.reduceat(rows, numpy.flatnonzero(first), axis=0)
        else:
            out[distinct] = rows[first]
            if distinct.size < ids.size:
                numpy.add.at(out, ids[~first], rows[~first])
    return out
