/* The kernel core's one thread pool, compiled into weightsmith._native.pool only
 * (csrc/pool.c; the codec modules reach it through csrc/ws_pool.h).
 *
 * ws_run(threads, count, grain, per_thread, fn, ctx) runs fn(ctx, lo, hi)
 * over [0, count) in contiguous chunks of at least `grain` items (at most
 * `per_thread` chunks per thread), on the calling thread and up to
 * threads - 1 pool threads, and returns when every chunk is done.  Chunks (rows or
 * blocks) are independent and each is written by exactly one thread, so the
 * bytes never depend on the thread count or on who took which chunk.
 *
 * Why in C: a kernel call on a 4096 x 512 tensor takes 0.3-3 ms; handing
 * spans to Python threads cost tens of microseconds per span in GIL
 * hand-overs and wake-ups, which capped two threads near 1.5x.
 *
 * Balance: there are several chunks per thread, claimed from one atomic
 * counter, so the caller (already running) takes more of them while a worker
 * wakes up.  The counter carries the call's generation in its high half: a
 * worker that wakes after its call is over finds another generation and claims
 * nothing, so the caller never waits for a late worker, only for chunks.
 * Idle workers poll for WS_SPIN_NS, then sleep on a condition variable.
 * One call uses the pool at a time (a concurrent caller does its chunks
 * alone).  After fork() the child forgets the parent's workers.
 */
#ifndef WS_THREADS_H
#define WS_THREADS_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define WS_POOL_IMPL
#include "ws_pool.h"

#define WS_MAX_THREADS 64
#define WS_CHUNKS_PER_THREAD 16
#if defined(__x86_64__) || defined(__i386__)
#define WS_PAUSE() __builtin_ia32_pause()
#else
#define WS_PAUSE() ((void)0)
#endif

/* How long an idle worker polls for the next call before it sleeps: a call
 * that follows within this time starts at once instead of paying a futex
 * wake-up and a scheduler hop (tens of microseconds, more in a VM), which on
 * millisecond calls is the difference between ~1.5x and ~1.9x on two threads.
 * OpenMP runtimes and ggml's own pool poll the same way. */
#define WS_SPIN_NS 2000000

static inline int64_t ws_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int started;       /* workers running */
    int busy;          /* a call owns the pool */
    uint32_t gen;      /* bumped for every call (under mu) */
    int nthreads;      /* of the current call: workers 1 .. nthreads-1 join */
    ws_part_fn fn;     /* the current call (under mu) */
    void *ctx;
    int64_t count;
    uint32_t nchunks;
    /* the two counters every chunk updates, each on its own cache line: a
     * claim or a count must not pull the line of the other (or of the mutex and
     * the call's fields) away from the thread that reads it next */
    _Alignas(64) uint64_t claim;    /* gen << 32 | next chunk (atomic) */
    _Alignas(64) uint32_t finished; /* chunks done (atomic) */
} ws_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static pthread_once_t ws_pool_once = PTHREAD_ONCE_INIT;

static void ws_pool_prepare(void) { pthread_mutex_lock(&ws_pool.mu); }
static void ws_pool_parent(void) { pthread_mutex_unlock(&ws_pool.mu); }
static void ws_pool_child(void) {
    pthread_mutex_init(&ws_pool.mu, NULL);
    pthread_cond_init(&ws_pool.go, NULL);
    pthread_cond_init(&ws_pool.done, NULL);
    ws_pool.started = ws_pool.busy = 0;
}
static void ws_pool_init(void) { pthread_atfork(ws_pool_prepare, ws_pool_parent, ws_pool_child); }

/* Claim and run chunks of call `gen` until none is left. */
static void ws_take_chunks(uint32_t gen, ws_part_fn fn, void *ctx, int64_t count, uint32_t nchunks) {
    for (;;) {
        uint64_t v = __atomic_load_n(&ws_pool.claim, __ATOMIC_ACQUIRE);
        if ((uint32_t)(v >> 32) != gen || (uint32_t)v >= nchunks) return;
        if (!__atomic_compare_exchange_n(&ws_pool.claim, &v, v + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        const int64_t i = (uint32_t)v;
        fn(ctx, count * i / nchunks, count * (i + 1) / nchunks);
        if (__atomic_add_fetch(&ws_pool.finished, 1, __ATOMIC_ACQ_REL) == nchunks) {
            pthread_mutex_lock(&ws_pool.mu);
            pthread_cond_signal(&ws_pool.done);
            pthread_mutex_unlock(&ws_pool.mu);
        }
    }
}

static void *ws_worker(void *arg) {
    /* me: joins calls of more than `me` threads; seen: the gen before the call
     * that created it (that call's gen is the first new one) */
    const int me = (int)((uintptr_t)arg & 0xffff);
    uint32_t seen = (uint32_t)((uintptr_t)arg >> 16);
    pthread_mutex_lock(&ws_pool.mu);
    for (;;) {
        if (ws_pool.gen == seen) { /* spin for WS_SPIN_NS, then sleep */
            pthread_mutex_unlock(&ws_pool.mu);
            const int64_t until = ws_now_ns() + WS_SPIN_NS;
            while (__atomic_load_n(&ws_pool.gen, __ATOMIC_ACQUIRE) == seen) {
                for (int i = 0; i < 64; ++i) WS_PAUSE();
                if (ws_now_ns() > until) break;
            }
            /* A call has just been published by a caller that still holds the
             * mutex for a few instructions: poll for it rather than sleep in the
             * kernel and wait for a wake-up (tens of microseconds in a VM). */
            while (pthread_mutex_trylock(&ws_pool.mu) != 0) {
                if (ws_now_ns() > until) {
                    pthread_mutex_lock(&ws_pool.mu);
                    break;
                }
                WS_PAUSE();
            }
            while (ws_pool.gen == seen) pthread_cond_wait(&ws_pool.go, &ws_pool.mu);
        }
        seen = ws_pool.gen;
        if (me >= ws_pool.nthreads) continue;
        const ws_part_fn fn = ws_pool.fn;
        void *ctx = ws_pool.ctx;
        const int64_t count = ws_pool.count;
        const uint32_t nchunks = ws_pool.nchunks;
        pthread_mutex_unlock(&ws_pool.mu);
        ws_take_chunks(seen, fn, ctx, count, nchunks);
        pthread_mutex_lock(&ws_pool.mu);
    }
    return NULL;
}

static void ws_run(int threads, int64_t count, int64_t grain, int64_t per_thread, ws_part_fn fn,
                   void *ctx) {
    int64_t n = threads < WS_MAX_THREADS ? threads : WS_MAX_THREADS;
    if (grain < 1) grain = 1;
    if (n > count / grain) n = count / grain;
    if (n <= 1) {
        if (count > 0) fn(ctx, 0, count);
        return;
    }
    pthread_once(&ws_pool_once, ws_pool_init);
    pthread_mutex_lock(&ws_pool.mu);
    if (ws_pool.busy) { /* another call has the pool: do it all here */
        pthread_mutex_unlock(&ws_pool.mu);
        fn(ctx, 0, count);
        return;
    }
    while (ws_pool.started < n - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int ok =
            pthread_create(&t, &attr, ws_worker,
                           (void *)(((uintptr_t)ws_pool.gen << 16) | (uintptr_t)(ws_pool.started + 1))) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) break;
#if defined(__linux__) && defined(__GLIBC__)
        /* named by its creator, so the name is there before the thread first runs
         * (tests and `top -H` tell the pool's threads by it) */
        pthread_setname_np(t, "weightsmith-qnt");
#endif
        ++ws_pool.started;
    }
    int64_t nchunks = n * per_thread;
    if (nchunks > UINT32_MAX) nchunks = UINT32_MAX;
    if (nchunks > count / grain) nchunks = count / grain;
    const uint32_t gen = ws_pool.gen + 1;
    ws_pool.busy = 1;
    ws_pool.nthreads = (int)n;
    ws_pool.fn = fn;
    ws_pool.ctx = ctx;
    ws_pool.count = count;
    ws_pool.nchunks = (uint32_t)nchunks;
    __atomic_store_n(&ws_pool.finished, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ws_pool.claim, (uint64_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&ws_pool.gen, gen, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&ws_pool.go);
    pthread_mutex_unlock(&ws_pool.mu);
    ws_take_chunks(gen, fn, ctx, count, (uint32_t)nchunks);
    /* the last chunks may still run on a worker: spin briefly, then sleep */
    for (int i = 0; i < 4000 && __atomic_load_n(&ws_pool.finished, __ATOMIC_ACQUIRE) < nchunks; ++i)
        WS_PAUSE();
    pthread_mutex_lock(&ws_pool.mu);
    while (__atomic_load_n(&ws_pool.finished, __ATOMIC_ACQUIRE) < nchunks)
        pthread_cond_wait(&ws_pool.done, &ws_pool.mu);
    ws_pool.busy = 0;
    pthread_mutex_unlock(&ws_pool.mu);
}

/* One kernel call: a few chunks per thread, so that the caller (already
 * running) takes more of them while a worker wakes up. */
static void ws_parallel(int threads, int64_t count, int64_t grain, ws_part_fn fn, void *ctx) {
    ws_run(threads, count, grain, WS_CHUNKS_PER_THREAD, fn, ctx);
}

#endif
