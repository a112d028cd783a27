"""Integer class labels as one-hot rows, the one implementation behind every ``one_hot``.

A row of the n x n identity per label, built by writing n-wide zero rows and
one 1 per row: ``numpy.eye(n)[labels]`` would first build the whole identity,
400 MB for a 10,000-word vocabulary, on every call.
"""
import numpy


def one_hot_rows(n, labels, dtype="float32"):
    """A numpy array of shape ``labels.shape + (n,)``: 1 at each label's column, 0 elsewhere.

    ``labels`` are integers (integer-valued floats are accepted) in [0, n); anything else is a
    ValueError naming the offending value.
    """
    labels = numpy.asarray(labels)
    if labels.dtype.kind == "f" and not numpy.all(labels == numpy.round(labels)):
        raise ValueError("one_hot: labels must be integers")
    if labels.dtype.kind not in "fiub":
        raise ValueError(f"one_hot: labels must be integers, got dtype {labels.dtype}")
    labels = labels.astype(numpy.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        raise ValueError(f"one_hot: labels must lie in [0, {n}), got range [{labels.min()}, {labels.max()}]")
    out = numpy.zeros(labels.shape + (int(n),), dtype=dtype)
    out.reshape(-1, int(n))[numpy.arange(labels.size), labels.reshape(-1)] = 1
    return out
