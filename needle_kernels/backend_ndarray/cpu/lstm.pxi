# The element-wise part of an LSTM step.
# Included by ndarray_backend_cpu.pyx: the module's declarations and shared state are there.

# ---------------------------------------------------------------- LSTM cell
# The element-wise part of one step (see the reference): a row of gates per task,
# vectorised (nk_lstm_row in ndarray_backend_cpu_vmath.h, for the selected instruction set).

def lstm_cell(z, c0, h, c, rows, hidden):
    """One LSTM step's new cell and hidden state from the gate pre-activations (see the reference)."""
    cdef Array Z = _arr("lstm_cell", "z", z)
    cdef Array C0 = _arr("lstm_cell", "c0", c0)
    cdef Array Hh = _arr("lstm_cell", "h", h)
    cdef Array C = _arr("lstm_cell", "c", c)
    rows, hidden = _check_dims("lstm_cell", (("rows", rows), ("hidden", hidden)))
    cdef Py_ssize_t R = rows, H = hidden, r
    if not (R >= 0 and H >= 1 and Z.size == R * 4 * H and C0.size == R * H and Hh.size == R * H and C.size == R * H):
        check_lstm("lstm_cell", rows, hidden, dict(z=Z), dict(c0=C0, h=Hh, c=C))
    cdef int nt = _team(R * H * 8)  # several transcendental functions per element
    with nogil:
        for r in prange(R, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_lstm_row(Z.data + r * 4 * H, C0.data + r * H, Hh.data + r * H, C.data + r * H, H)


def lstm_cell_backward(z, c0, dh, dc, dz, dc0, rows, hidden):
    """The adjoints of lstm_cell's inputs from those of its outputs (see the reference)."""
    cdef Array Z = _arr("lstm_cell_backward", "z", z)
    cdef Array C0 = _arr("lstm_cell_backward", "c0", c0)
    cdef Array DH = _arr("lstm_cell_backward", "dh", dh)
    cdef Array DC = _arr("lstm_cell_backward", "dc", dc)
    cdef Array DZ = _arr("lstm_cell_backward", "dz", dz)
    cdef Array DC0 = _arr("lstm_cell_backward", "dc0", dc0)
    rows, hidden = _check_dims("lstm_cell_backward", (("rows", rows), ("hidden", hidden)))
    cdef Py_ssize_t R = rows, H = hidden, r
    if not (R >= 0 and H >= 1 and Z.size == R * 4 * H and DZ.size == R * 4 * H and C0.size == R * H
            and DH.size == R * H and DC.size == R * H and DC0.size == R * H):
        check_lstm("lstm_cell_backward", rows, hidden, dict(z=Z, dz=DZ), dict(c0=C0, dh=DH, dc=DC, dc0=DC0))
    cdef int nt = _team(R * H * 12)
    with nogil:
        for r in prange(R, num_threads=nt, schedule="static"):
            nk_note_thread(threadid())
            nk_lstm_row_backward(Z.data + r * 4 * H, C0.data + r * H, DH.data + r * H, DC.data + r * H,
                                 DZ.data + r * 4 * H, DC0.data + r * H, H)
