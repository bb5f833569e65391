/*
 * apitrace: where the host's time goes in CUDA and cuBLASLt calls, by phase of the bench.
 *
 * A profiling aid for the lent NVIDIA machine, which has no Nsight Systems: it answers
 * questions like "what does the first follow-up of a process pay that the second does not"
 * (graph instantiation? module loads? allocations? cuBLASLt heuristics?).
 *
 *   gcc -O2 -shared -fPIC -o libapitrace.so bench/cuda/apitrace.c -ldl -lpthread
 *   LD_PRELOAD=$PWD/libapitrace.so CUDA_INJECTION64_PATH=$PWD/libapitrace.so \
 *     APITRACE_PHASES=/tmp/phase APITRACE_OUT=trace.tsv gemma-desk-bench --plan plan.json
 *
 * - Every CUDA runtime and driver API call is timed through CUPTI's callback API (the driver
 *   loads this library as its injection and calls InitializeInjection). libcupti.so is opened
 *   at run time; nothing here needs CUDA's headers.
 * - cuBLASLt's heuristic query and matmul, and NVRTC's compile, are host functions CUPTI does
 *   not see: LD_PRELOAD puts the wrappers below in front of libmlx's dynamic references.
 * - The phase is the NUL-terminated name at the start of the file APITRACE_PHASES, which
 *   gemma-desk-bench writes at each step when the variable is set.
 * At exit, APITRACE_OUT (default: stderr) gets one line per (phase, function):
 * phase, first-seen order, function, calls, total ms, max ms.
 * A traced run is slower (a callback around every call): its times attribute, they do not
 * measure speed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* CUPTI's callback API, as cupti_callbacks.h (CUDA 13) declares it. */
typedef struct {
    int callbackSite; /* 0 enter, 1 exit */
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CallbackData;
typedef void (*CallbackFunc)(void *, int, uint32_t, const void *);
enum { DOMAIN_DRIVER = 1, DOMAIN_RUNTIME = 2 };

#define MAX_PHASES 64
#define MAX_ROWS 8192

typedef struct {
    int phase;
    const char *name; /* static strings (CUPTI's, or ours): compared by address */
    char domain;
    uint64_t calls, total_ns, max_ns;
} Row;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char phases[MAX_PHASES][64];
static int phase_count;
static Row rows[MAX_ROWS];
static int row_count;
#define TABLE 16384
static int table[TABLE];
static const char *phase_map; /* the mmapped phase file, or NULL */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Index of the current phase (the lock is held). */
static int current_phase(void) {
    char name[64] = "-";
    if (phase_map) {
        memcpy(name, phase_map, 63);
        name[63] = 0;
        if (!name[0]) strcpy(name, "-");
    }
    for (int i = 0; i < phase_count; i++)
        if (!strcmp(phases[i], name)) return i;
    if (phase_count == MAX_PHASES) return MAX_PHASES - 1;
    strcpy(phases[phase_count], name);
    return phase_count++;
}

static void record(char domain, const char *name, uint64_t ns) {
    pthread_mutex_lock(&lock);
    int phase = current_phase();
    /* Open addressing over (phase, name, domain); rows keep first-seen order for the report. */
    uintptr_t key = (uintptr_t)name ^ ((uintptr_t)phase << 48) ^ ((uintptr_t)domain << 56);
    size_t slot = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 50) & (TABLE - 1);
    Row *row = NULL;
    for (size_t probe = 0; probe < TABLE; probe++, slot = (slot + 1) & (TABLE - 1)) {
        if (table[slot] < 0) {
            if (row_count < MAX_ROWS) {
                table[slot] = row_count;
                row = &rows[row_count++];
                *row = (Row){phase, name, domain, 0, 0, 0};
            }
            break;
        }
        Row *r = &rows[table[slot]];
        if (r->phase == phase && r->name == name && r->domain == domain) {
            row = r;
            break;
        }
    }
    if (row) {
        row->calls++;
        row->total_ns += ns;
        if (ns > row->max_ns) row->max_ns = ns;
    }
    pthread_mutex_unlock(&lock);
}

static void report(void) {
    const char *path = getenv("APITRACE_OUT");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out) return;
    pthread_mutex_lock(&lock);
    fprintf(out, "phase\torder\tfunction\tcalls\ttotal_ms\tmax_ms\n");
    for (int i = 0; i < row_count; i++) {
        const Row *r = &rows[i];
        fprintf(out, "%s\t%d\t%c:%s\t%llu\t%.3f\t%.3f\n", phases[r->phase], r->phase, r->domain,
                r->name, (unsigned long long)r->calls, r->total_ns / 1e6, r->max_ns / 1e6);
    }
    pthread_mutex_unlock(&lock);
    if (out != stderr) fclose(out);
}

__attribute__((constructor)) static void start(void) {
    memset(table, 0xff, sizeof table);
    const char *path = getenv("APITRACE_PHASES");
    if (path) {
        int fd = open(path, O_RDWR | O_CREAT, 0644);
        if (fd >= 0 && ftruncate(fd, 64) == 0) {
            void *map = mmap(NULL, 64, PROT_READ, MAP_SHARED, fd, 0);
            if (map != MAP_FAILED) phase_map = map;
        }
        if (fd >= 0) close(fd);
    }
    atexit(report);
}

static void on_api(void *user, int domain, uint32_t id, const void *data) {
    (void)user;
    (void)id;
    const CallbackData *cb = data;
    if (cb->callbackSite == 0) {
        *cb->correlationData = now_ns();
    } else {
        record(domain == DOMAIN_DRIVER ? 'd' : 'r', cb->functionName,
               now_ns() - *cb->correlationData);
    }
}

/* Called by the CUDA driver at initialization when CUDA_INJECTION64_PATH names this file. */
int InitializeInjection(void) {
    void *cupti = dlopen("libcupti.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!cupti) cupti = dlopen("libcupti.so", RTLD_NOW | RTLD_GLOBAL);
    if (!cupti) {
        fprintf(stderr, "apitrace: libcupti not found: %s\n", dlerror());
        return 1;
    }
    int (*subscribe)(void **, CallbackFunc, void *) = dlsym(cupti, "cuptiSubscribe");
    int (*enable)(uint32_t, void *, int) = dlsym(cupti, "cuptiEnableDomain");
    void *subscriber = NULL;
    if (!subscribe || !enable || subscribe(&subscriber, on_api, NULL) != 0) {
        fprintf(stderr, "apitrace: cuptiSubscribe failed\n");
        return 1;
    }
    enable(1, subscriber, DOMAIN_DRIVER);
    enable(1, subscriber, DOMAIN_RUNTIME);
    return 1;
}

/* Host-side library functions, timed in front of the real ones. */
#define NEXT(name) static void *real; if (!real) real = dlsym(RTLD_NEXT, name)

int cublasLtMatmulAlgoGetHeuristic(void *h, void *op, void *a, void *b, void *c, void *d,
                                   void *pref, int requested, void *results, int *returned) {
    NEXT("cublasLtMatmulAlgoGetHeuristic");
    uint64_t t0 = now_ns();
    int status = ((int (*)(void *, void *, void *, void *, void *, void *, void *, int, void *,
                           int *))real)(h, op, a, b, c, d, pref, requested, results, returned);
    record('l', "cublasLtMatmulAlgoGetHeuristic", now_ns() - t0);
    return status;
}

int cublasLtMatmul(void *h, void *op, const void *alpha, const void *a, void *adesc,
                   const void *b, void *bdesc, const void *beta, const void *c, void *cdesc,
                   void *d, void *ddesc, const void *algo, void *workspace, size_t workspace_size,
                   void *stream) {
    NEXT("cublasLtMatmul");
    uint64_t t0 = now_ns();
    int status = ((int (*)(void *, void *, const void *, const void *, void *, const void *,
                           void *, const void *, const void *, void *, void *, void *,
                           const void *, void *, size_t, void *))real)(
        h, op, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, workspace,
        workspace_size, stream);
    record('l', "cublasLtMatmul", now_ns() - t0);
    return status;
}

int nvrtcCompileProgram(void *program, int count, const char *const *options) {
    NEXT("nvrtcCompileProgram");
    uint64_t t0 = now_ns();
    int status = ((int (*)(void *, int, const char *const *))real)(program, count, options);
    record('n', "nvrtcCompileProgram", now_ns() - t0);
    return status;
}
