"""Bytes held by a backend's live Arrays: the allocator's view of memory.

Counted where a backend makes and frees its buffers, so a memory pool that keeps freed
blocks for reuse (cupy's) does not hide what the arrays hold; this is what activation
checkpointing saves. The numpy reference and the CUDA backend each keep one counter
(the Cython backend counts the same way in C).
"""


class MemoryCounter:
    """``account(nbytes)`` as buffers come (positive) and go (negative); the live total and its peak."""

    def __init__(self):
        self.live_bytes = 0
        self.peak_bytes = 0

    def account(self, nbytes):
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes

    def memory_stats(self):
        """{"live_bytes": held by live Arrays now, "peak_bytes": the most held since the last reset}."""
        return {"live_bytes": self.live_bytes, "peak_bytes": self.peak_bytes}

    def reset_peak_memory(self):
        """Start a new peak from what is held now."""
        self.peak_bytes = self.live_bytes
