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
 * - GPU time: every kernel's duration, through CUPTI's activity API (domain k, by kernel name),
 *   assigned to the phase in which it started. So a phase's k total against its wall time tells
 *   a GPU-bound step from a host-bound one, and which kernels its GPU time goes to.
 * - Shapes: each cuBLASLt heuristic query is also counted under its GEMM's shape (domain h:
 *   "A rows x cols / ld, batch" for A, B and C, and the transposes), so a query that loads new
 *   kernels names the GEMM that needed it.
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
    const char *name; /* static or interned strings: compared by address */
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

/* CUPTI's activity API, as cupti_activity.h (CUDA 13.0) declares it: a kernel record is a
 * CUpti_ActivityKernel10 with kind at 0, start and end (ns) at 16 and 24 and the mangled name at
 * 104; CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL is 10. */
enum { KIND_KERNEL = 10, KERNEL_START = 16, KERNEL_END = 24, KERNEL_NAME = 104 };
static int (*cupti_timestamp)(uint64_t *);
static int (*cupti_next_record)(uint8_t *, size_t, void **);
static int (*cupti_flush_all)(uint32_t);
static char *(*demangle)(const char *, char *, size_t *, int *);

/* Phase changes on CUPTI's clock, for placing kernels (the lock is held). */
#define MAX_MARKS 4096
static struct { uint64_t ts; int phase; } marks[MAX_MARKS];
static int mark_count;
static void mark_phase(int phase) {
    if (!cupti_timestamp || (mark_count && marks[mark_count - 1].phase == phase)) return;
    if (mark_count == MAX_MARKS) return;
    uint64_t ts = 0;
    cupti_timestamp(&ts);
    marks[mark_count].ts = ts;
    marks[mark_count++].phase = phase;
}

/* Adds one call to the row of (phase, domain, name); the lock is held. */
static void record_at(int phase, char domain, const char *name, uint64_t ns) {
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
}

static void record(char domain, const char *name, uint64_t ns) {
    pthread_mutex_lock(&lock);
    int phase = current_phase();
    mark_phase(phase);
    record_at(phase, domain, name, ns);
    pthread_mutex_unlock(&lock);
}

/* A stable copy of `s` (at most 159 characters), the same pointer for equal strings. */
#define MAX_NAMES 4096
static char *names[MAX_NAMES];
static int name_count;
static const char *intern(const char *s) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s", s);
    pthread_mutex_lock(&lock);
    const char *found = NULL;
    for (int i = 0; i < name_count && !found; i++)
        if (!strcmp(names[i], buf)) found = names[i];
    if (!found && name_count < MAX_NAMES) found = names[name_count++] = strdup(buf);
    pthread_mutex_unlock(&lock);
    return found ? found : "(too many names)";
}

/* The demangled, interned name of a kernel, cached by CUPTI's name pointer (stable per
 * function): demangling every record would slow the traced process. */
#define KERNEL_SLOTS 8192
static struct { const char *mangled, *name; } kernel_names[KERNEL_SLOTS];
static const char *kernel_name_locked(const char *mangled) {
    size_t slot = ((uintptr_t)mangled * 0x9E3779B97F4A7C15ull) >> 51;
    for (size_t probe = 0; probe < KERNEL_SLOTS; probe++, slot = (slot + 1) % KERNEL_SLOTS) {
        if (kernel_names[slot].mangled == mangled) return kernel_names[slot].name;
        if (!kernel_names[slot].mangled) {
            char *plain = NULL;
            int ok = -1;
            if (demangle) plain = demangle(mangled, NULL, NULL, &ok);
            const char *name = intern(ok == 0 && plain ? plain : mangled);
            free(plain);
            kernel_names[slot].mangled = mangled;
            kernel_names[slot].name = name;
            return name;
        }
    }
    return intern(mangled);
}

static pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *kernel_name(const char *mangled) {
    if (!mangled) return "?";
    pthread_mutex_lock(&kernel_lock);
    const char *name = kernel_name_locked(mangled);
    pthread_mutex_unlock(&kernel_lock);
    return name;
}

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void buffer_completed(void *context, uint32_t stream, uint8_t *buffer, size_t size,
                             size_t valid) {
    (void)context;
    (void)stream;
    (void)size;
    void *record = NULL;
    while (cupti_next_record(buffer, valid, &record) == 0) {
        const uint8_t *r = record;
        if (*(const uint32_t *)r != KIND_KERNEL) continue;
        uint64_t start = *(const uint64_t *)(r + KERNEL_START);
        uint64_t end = *(const uint64_t *)(r + KERNEL_END);
        const char *name = kernel_name(*(const char *const *)(r + KERNEL_NAME));
        pthread_mutex_lock(&lock);
        int phase = 0;
        for (int i = 0; i < mark_count && marks[i].ts <= start; i++) phase = marks[i].phase;
        record_at(phase, 'k', name, end - start);
        pthread_mutex_unlock(&lock);
    }
    free(buffer);
}

static void report(void) {
    if (cupti_flush_all) cupti_flush_all(1);
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
    int (*register_buffers)(void *, void *) = dlsym(cupti, "cuptiActivityRegisterCallbacks");
    int (*activity)(int) = dlsym(cupti, "cuptiActivityEnable");
    cupti_next_record = dlsym(cupti, "cuptiActivityGetNextRecord");
    cupti_flush_all = dlsym(cupti, "cuptiActivityFlushAll");
    demangle = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (register_buffers && activity && cupti_next_record &&
        register_buffers((void *)buffer_requested, (void *)buffer_completed) == 0 &&
        activity(KIND_KERNEL) == 0) {
        pthread_mutex_lock(&lock);
        cupti_timestamp = dlsym(cupti, "cuptiGetTimestamp");
        mark_phase(current_phase());
        pthread_mutex_unlock(&lock);
    } else {
        cupti_flush_all = NULL;
        fprintf(stderr, "apitrace: no kernel activity (GPU times left out)\n");
    }
    return 1;
}

/* Host-side library functions, timed in front of the real ones. */
#define NEXT(name) static void *real; if (!real) real = dlsym(RTLD_NEXT, name)

/* "rows x cols / ld (batch)" of a cuBLASLt matrix layout (cublasLt.h: ROWS 2, COLS 3 are
 * uint64, LD 4 int64, BATCH_COUNT 5 int32). */
static int describe_layout(char *out, size_t size, void *layout) {
    static int (*get)(void *, int, void *, size_t, size_t *);
    if (!get) get = dlsym(RTLD_DEFAULT, "cublasLtMatrixLayoutGetAttribute");
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0;
    int32_t batch = 1;
    size_t n;
    if (get) {
        get(layout, 2, &rows, sizeof rows, &n);
        get(layout, 3, &cols, sizeof cols, &n);
        get(layout, 4, &ld, sizeof ld, &n);
        get(layout, 5, &batch, sizeof batch, &n);
    }
    return snprintf(out, size, "%llux%llu/%lld(%d)", (unsigned long long)rows,
                    (unsigned long long)cols, (long long)ld, batch);
}

/* The GEMM's shape: transposes (TRANSA 3, TRANSB 4: int32), then A, B and C. */
static const char *describe_gemm(void *op, void *a, void *b, void *c) {
    static int (*get)(void *, int, void *, size_t, size_t *);
    if (!get) get = dlsym(RTLD_DEFAULT, "cublasLtMatmulDescGetAttribute");
    int32_t ta = 0, tb = 0;
    size_t n;
    if (get) {
        get(op, 3, &ta, sizeof ta, &n);
        get(op, 4, &tb, sizeof tb, &n);
    }
    char text[160];
    int used = snprintf(text, sizeof text, "%c%c A ", ta ? 'T' : 'N', tb ? 'T' : 'N');
    used += describe_layout(text + used, sizeof text - used, a);
    used += snprintf(text + used, sizeof text - used, " B ");
    used += describe_layout(text + used, sizeof text - used, b);
    used += snprintf(text + used, sizeof text - used, " C ");
    describe_layout(text + used, sizeof text - used, c);
    return intern(text);
}

int cublasLtMatmulAlgoGetHeuristic(void *h, void *op, void *a, void *b, void *c, void *d,
                                   void *pref, int requested, void *results, int *returned) {
    NEXT("cublasLtMatmulAlgoGetHeuristic");
    uint64_t t0 = now_ns();
    int status = ((int (*)(void *, void *, void *, void *, void *, void *, void *, int, void *,
                           int *))real)(h, op, a, b, c, d, pref, requested, results, returned);
    uint64_t ns = now_ns() - t0;
    record('l', "cublasLtMatmulAlgoGetHeuristic", ns);
    record('h', describe_gemm(op, a, b, c), ns);
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
