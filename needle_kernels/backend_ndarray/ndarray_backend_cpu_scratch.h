/* Scratch buffers of the Cython + OpenMP backend's kernels: packed panels of a matmul, a
 * convolution's gathered windows, per-thread partial sums.
 *
 * A kernel's scratch lives for one call, but the next call of the same kernel wants the
 * same bytes again. Fresh from the allocator, a large buffer is fresh pages: the kernel
 * that first writes them takes a page fault (and a page of zeros) per 4 KB, which for the
 * 16 MB packed B of a 2048 x 2048 product took longer than packing it. So a few freed
 * buffers are kept (NK_SCRATCH_SLOTS of them, each at most nk_scratch_cap bytes) and
 * the smallest big enough is handed to the next request. Kernels run without the GIL, from
 * any Python thread, so a slot is taken and given back with atomic operations; a request
 * that finds no free slot big enough gets a fresh buffer, as before.
 */
#ifndef NK_CPU_SCRATCH_H
#define NK_CPU_SCRATCH_H

#include <stddef.h>
#include <stdlib.h>

#include "ndarray_backend_cpu_kernels.h" /* nk_buffer_alloc */

#define NK_SCRATCH_SLOTS 4
/* Smaller requests come from the allocator's heap, already mapped: nothing to save. */
#define NK_SCRATCH_MIN ((size_t)64 << 10)

typedef struct {
    int busy;       /* 1 while a kernel holds the buffer, or while a slot is being changed */
    void *ptr;      /* a buffer of nk_scratch_fresh's, or NULL */
} nk_scratch_slot;

static nk_scratch_slot nk_scratch_slots[NK_SCRATCH_SLOTS];
/* The largest buffer kept (0: none is kept), set once as the backend loads. */
static size_t nk_scratch_cap = (size_t)32 << 20;

/* A fresh buffer from the Arrays' allocator: its size in the 64 bytes before it (so
 * nk_scratch_free needs only the pointer), itself 64-byte aligned. */
static void *nk_scratch_fresh(size_t bytes)
{
    void *base = nk_buffer_alloc(bytes + 64);
    if (base == NULL) return NULL;
    *(size_t *)base = bytes;
    return (char *)base + 64;
}

static size_t nk_scratch_size(void *p) { return *(size_t *)((char *)p - 64); }

static void nk_scratch_release(void *p)
{
    if (p != NULL) free((char *)p - 64);
}

static int nk_scratch_take(nk_scratch_slot *s)
{
    int idle = 0;
    return __atomic_compare_exchange_n(&s->busy, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static void nk_scratch_give(nk_scratch_slot *s) { __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE); }

/* A 64-byte aligned buffer of at least `bytes` bytes (contents undefined), or NULL when
 * memory is short; give it back with nk_scratch_free. */
static void *nk_scratch_alloc(size_t bytes)
{
    if (bytes >= NK_SCRATCH_MIN && bytes <= nk_scratch_cap) {
        nk_scratch_slot *best = NULL; /* the smallest idle buffer big enough */
        for (int i = 0; i < NK_SCRATCH_SLOTS; i++) {
            nk_scratch_slot *s = &nk_scratch_slots[i];
            if (!nk_scratch_take(s)) continue;
            if (s->ptr != NULL && nk_scratch_size(s->ptr) >= bytes
                && (best == NULL || nk_scratch_size(s->ptr) < nk_scratch_size(best->ptr))) {
                if (best != NULL) nk_scratch_give(best);
                best = s;
            } else {
                nk_scratch_give(s);
            }
        }
        if (best != NULL) return best->ptr; /* the slot stays busy until the buffer is freed */
    }
    return nk_scratch_fresh(bytes);
}

/* Give back a buffer of nk_scratch_alloc's (NULL is allowed). A buffer that came from a
 * slot frees the slot; a fresh one is kept in place of an empty or smaller idle slot's,
 * when it is small enough to keep, or else freed. */
static void nk_scratch_free(void *p)
{
    if (p == NULL) return;
    size_t bytes = nk_scratch_size(p);
    for (int i = 0; i < NK_SCRATCH_SLOTS; i++) {
        nk_scratch_slot *s = &nk_scratch_slots[i];
        /* (another thread may be putting a buffer into a slot it has taken: read atomically) */
        if (__atomic_load_n(&s->busy, __ATOMIC_ACQUIRE) && __atomic_load_n(&s->ptr, __ATOMIC_RELAXED) == p) {
            nk_scratch_give(s);
            return;
        }
    }
    if (bytes >= NK_SCRATCH_MIN && bytes <= nk_scratch_cap) {
        for (int i = 0; i < NK_SCRATCH_SLOTS; i++) {
            nk_scratch_slot *s = &nk_scratch_slots[i];
            if (!nk_scratch_take(s)) continue;
            if (s->ptr == NULL || nk_scratch_size(s->ptr) < bytes) {
                void *old = s->ptr;
                __atomic_store_n(&s->ptr, p, __ATOMIC_RELAXED);
                nk_scratch_give(s);
                nk_scratch_release(old);
                return;
            }
            nk_scratch_give(s);
        }
    }
    nk_scratch_release(p);
}

/* Free every idle kept buffer. */
static void nk_scratch_release_idle(void)
{
    for (int i = 0; i < NK_SCRATCH_SLOTS; i++) {
        nk_scratch_slot *s = &nk_scratch_slots[i];
        if (!nk_scratch_take(s)) continue;
        nk_scratch_release(s->ptr);
        s->ptr = NULL;
        nk_scratch_give(s);
    }
}

/* Bytes held by idle kept buffers. */
static size_t nk_scratch_idle_bytes(void)
{
    size_t total = 0;
    for (int i = 0; i < NK_SCRATCH_SLOTS; i++) {
        nk_scratch_slot *s = &nk_scratch_slots[i];
        if (!nk_scratch_take(s)) continue;
        total += s->ptr != NULL ? nk_scratch_size(s->ptr) : 0;
        nk_scratch_give(s);
    }
    return total;
}

#endif
