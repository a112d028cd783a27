/* numpy's OpenBLAS run on this extension's OpenMP threads.
 *
 * OpenBLAS (pthreads build) keeps a thread pool of its own whose workers spin for
 * about 2^28 cycles after each call. In a notebook that alternates numpy and
 * needle_kernels, a kernel started right after a numpy product finds those workers on
 * its cores, and its own team waits for a time slice (a 256 x 256 matmul ran several
 * times slower). OpenBLAS lets the caller run its parallel jobs instead
 * (openblas_set_threads_callback_function, 0.3.27 on): nk_blas_threads runs them on
 * libgomp's team, the one this extension's kernels use, so the two libraries take turns
 * on one set of threads and neither spins against the other.
 *
 * OpenBLAS's jobs wait for one another (a gemm job reads the panels of B the others
 * pack), so all numjobs of them must run at once, one per thread. An OpenMP team gives
 * that unless the runtime may hand out fewer threads (inside a parallel region, with
 * OMP_DYNAMIC, under a thread limit); then the jobs run on threads created for the call.
 */
#ifndef NK_CPU_BLAS_H
#define NK_CPU_BLAS_H

#include <omp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*nk_blas_dojob)(int thread_num, void *jobdata, int dojob_data);

static long nk_blas_calls = 0; /* calls run by nk_blas_threads: the proof that numpy used it */

typedef struct {
    nk_blas_dojob dojob;
    int thread_num;
    void *jobdata;
    int dojob_data;
} nk_blas_job;

static void *nk_blas_run_job(void *arg)
{
    nk_blas_job *job = (nk_blas_job *)arg;
    job->dojob(job->thread_num, job->jobdata, job->dojob_data);
    return NULL;
}

/* The jobs on threads of their own, when an OpenMP team of numjobs cannot be promised. */
static void nk_blas_threads_posix(nk_blas_dojob dojob, int numjobs, size_t elsize, char *jobdata, int data)
{
    nk_blas_job *jobs = (nk_blas_job *)malloc((size_t)numjobs * sizeof(nk_blas_job));
    pthread_t *threads = (pthread_t *)malloc((size_t)numjobs * sizeof(pthread_t));
    int started = 0;
    if (jobs && threads) {
        for (int i = 0; i < numjobs; i++) jobs[i] = (nk_blas_job){dojob, i, jobdata + (size_t)i * elsize, data};
        for (started = 1; started < numjobs; started++)
            if (pthread_create(&threads[started], NULL, nk_blas_run_job, &jobs[started]) != 0) break;
    }
    if (started < numjobs) { /* a job left unrun would leave the others waiting forever */
        fprintf(stderr, "needle_kernels: could not start %d threads for OpenBLAS's jobs\n", numjobs);
        abort();
    }
    nk_blas_run_job(&jobs[0]);
    for (int i = 1; i < numjobs; i++) pthread_join(threads[i], NULL);
    free(jobs);
    free(threads);
}

static void nk_blas_threads(int sync, nk_blas_dojob dojob, int numjobs, size_t elsize, void *jobdata, int data)
{
    (void)sync; /* OpenBLAS asks for synchronous runs only */
    __atomic_add_fetch(&nk_blas_calls, 1, __ATOMIC_RELAXED);
    if (numjobs <= 1) {
        if (numjobs == 1) dojob(0, jobdata, data);
        return;
    }
    if (omp_in_parallel() || omp_get_dynamic() || omp_get_thread_limit() < numjobs) {
        nk_blas_threads_posix(dojob, numjobs, elsize, (char *)jobdata, data);
        return;
    }
#pragma omp parallel num_threads(numjobs)
    {
        int t = omp_get_thread_num();
        dojob(t, (char *)jobdata + (size_t)t * elsize, data);
    }
}

static inline size_t nk_blas_threads_address(void) { return (size_t)&nk_blas_threads; }

static inline long nk_blas_threads_calls(void) { return __atomic_load_n(&nk_blas_calls, __ATOMIC_RELAXED); }

#endif
