/*
 * dynamic.c - dynamic programs: guards, specializations, the variant.
 *
 * See dynamic.h for the parts and docs/DYNAMIC.md for the user's view.
 *
 * Threads. The program is used by one caller thread at a time (as an
 * fc_context is). A background thread, started with the program, compiles
 * queued specializations: it parses the program's graph text with the
 * shape's bindings into a context of its own, calls fc_compile (serialized
 * process-wide with every other compile), and opens the device and loads
 * the module so that the first run of the specialization does not pay for
 * it. The table of specializations is shared under one mutex; the caller
 * holds it only to look up, queue and adopt, never while anything compiles
 * or runs. A specialization evicted from the table (LRU) is handed to the
 * background thread to free, since freeing waits for the device.
 *
 * Nothing here prints unless FUSEC_LOG asks for it.
 */
#include "runtime/cuda/dynamic.h"

#include "ir/ir.h"
#include "ir/switches.h"
#include "ir/timing.h"
#include "runtime/cuda/cuda.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_SPECS 8
/* Shapes of the variant kept ready (storage, grids, CUDA Graph). */
#define MAX_INSTANCES 8

/* ------------------------------------------------------------------ */
/* FUSEC_LOG.                                                          */
/* ------------------------------------------------------------------ */

static int log_topics(void) {
    const char *e = fc_switch_str(FC_SW_LOG);
    if (!*e) return 0;
    int t = 0;
    if (strstr(e, "guards")) t |= FC_LOG_GUARDS;
    if (strstr(e, "graphs")) t |= FC_LOG_GRAPHS;
    if (strstr(e, "spec")) t |= FC_LOG_SPEC;
    if (strstr(e, "all")) t |= FC_LOG_GUARDS | FC_LOG_GRAPHS | FC_LOG_SPEC;
    return t;
}

bool fc_trace_on(int topic) { return (log_topics() & topic) != 0; }

void fc_trace(int topic, const char *fmt, ...) {
    if (!fc_trace_on(topic)) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fusec[%s]: %s\n",
            topic == FC_LOG_GUARDS ? "guards" : topic == FC_LOG_GRAPHS ? "graphs" : "spec", buf);
}

/* ------------------------------------------------------------------ */
/* Guards: binding the symbols from the shapes of one call.            */
/* ------------------------------------------------------------------ */

static const char *tensor_name(const fc_program_tensor *t, int i, char *buf, size_t n) {
    if (t->name && t->name[0]) snprintf(buf, n, "input %d (%%%s)", i, t->name);
    else snprintf(buf, n, "input %d", i);
    return buf;
}

fc_status fc_guard_bind(fc_context *ctx, const fc_program_desc *sig, const char *const *sym_names, int nsyms,
                        const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout, bool check_ptrs,
                        int64_t *syms) {
    const char *g = sig->graph_name ? sig->graph_name : "?";
    if (nin != sig->nparams || nout != sig->noutputs)
        return fc_set_error(ctx, FC_ERR_USAGE, "graph %s takes %d inputs and %d outputs, not %d and %d", g,
                            sig->nparams, sig->noutputs, nin, nout);
    if (nin > 0 && !inputs) return fc_set_error(ctx, FC_ERR_USAGE, "graph %s: inputs is NULL", g);
    int from_input[FC_DYN_MAX_SYMS], from_dim[FC_DYN_MAX_SYMS];
    for (int k = 0; k < nsyms; k++) syms[k] = -1, from_input[k] = from_dim[k] = -1;
    char nm[96];
    for (int i = 0; i < nin; i++) {
        const fc_program_tensor *t = &sig->params[i];
        const fc_tensor *x = &inputs[i];
        if (x->dtype != t->dtype || x->rank != t->rank)
            return fc_set_error(ctx, FC_ERR_INPUT, "graph %s: %s is %s of rank %d, not %s of rank %d", g,
                                tensor_name(t, i, nm, sizeof nm), fc_dtype_name(t->dtype), t->rank,
                                fc_dtype_name(x->dtype), x->rank);
        for (int d = 0; d < t->rank; d++) {
            int64_t got = x->shape[d];
            if (got <= 0)
                return fc_set_error(ctx, FC_ERR_INPUT, "graph %s: %s dim %d is %lld: sizes must be at least 1", g,
                                    tensor_name(t, i, nm, sizeof nm), d, (long long)got);
            if (!fc_dim_is_sym(t->dims[d])) {
                if (got != t->dims[d])
                    return fc_set_error(ctx, FC_ERR_INPUT, "graph %s: %s dim %d is %lld, but the graph fixes it at %lld",
                                        g, tensor_name(t, i, nm, sizeof nm), d, (long long)got,
                                        (long long)t->dims[d]);
                continue;
            }
            int k = fc_dim_sym_index(t->dims[d]);
            FC_ASSERT(k < nsyms);
            if (syms[k] < 0) {
                syms[k] = got;
                from_input[k] = i;
                from_dim[k] = d;
            } else if (syms[k] != got) {
                char first[96];
                tensor_name(&sig->params[from_input[k]], from_input[k], first, sizeof first);
                return fc_set_error(ctx, FC_ERR_INPUT,
                                    "graph %s: %s dim %d is %s = %lld, but %s dim %d says %s = %lld", g,
                                    tensor_name(t, i, nm, sizeof nm), d, sym_names[k], (long long)got, first,
                                    from_dim[k], sym_names[k], (long long)syms[k]);
            }
        }
        if (check_ptrs && ((uintptr_t)x->data & 15u))
            return fc_set_error(ctx, FC_ERR_INPUT,
                                "graph %s: %s is at %p, which is not 16-byte aligned (fusec's kernels move 16-byte "
                                "vectors; cuMemAlloc gives 256-byte alignment)",
                                g, tensor_name(t, i, nm, sizeof nm), x->data);
    }
    for (int k = 0; k < nsyms; k++)
        if (syms[k] < 0)
            return fc_set_error(ctx, FC_ERR_INPUT, "graph %s: symbol %s is in no input's shape", g, sym_names[k]);
    for (int o = 0; o < nout && outputs; o++) {
        const fc_program_tensor *t = &sig->outputs[o];
        const fc_tensor *x = &outputs[o];
        bool ok = x->dtype == t->dtype && x->rank == t->rank;
        for (int d = 0; ok && d < t->rank; d++) {
            int64_t want = fc_dim_value(t->dims[d], syms);
            ok = x->shape[d] == want;
        }
        if (!ok) {
            char want[160];
            size_t n = (size_t)snprintf(want, sizeof want, "%s[", fc_dtype_name(t->dtype));
            for (int d = 0; d < t->rank && n < sizeof want; d++)
                n += (size_t)snprintf(want + n, sizeof want - n, "%s%lld", d ? ", " : "",
                                      (long long)fc_dim_value(t->dims[d], syms));
            if (n < sizeof want) snprintf(want + n, sizeof want - n, "]");
            return fc_set_error(ctx, FC_ERR_INPUT, "graph %s: output %d must be %s for these inputs", g, o, want);
        }
        if (check_ptrs && ((uintptr_t)x->data & 15u))
            return fc_set_error(ctx, FC_ERR_INPUT, "graph %s: output %d is at %p, which is not 16-byte aligned", g, o,
                                x->data);
    }
    return FC_OK;
}

/* ------------------------------------------------------------------ */
/* The state of a dynamic program.                                     */
/* ------------------------------------------------------------------ */

typedef enum spec_state { SPEC_QUEUED, SPEC_COMPILING, SPEC_READY, SPEC_FAILED } spec_state;

typedef struct spec {
    int64_t key[FC_DYN_MAX_SYMS];
    spec_state state;
    fc_context *ctx; /* the specialization's own context (its errors) */
    fc_program *prog;
    uint64_t used;   /* LRU clock of its last run */
    char error[200]; /* FAILED: why */
    /* The pointers of the run that missed (inputs, then outputs), which
     * the specialization's graph is built for before it lands; NULL: none. */
    void **ptrs;
    int nin, nout;
} spec;

typedef struct instance {
    int64_t key[FC_DYN_MAX_SYMS];
    fc_program *prog; /* NULL: free slot */
    uint64_t used;
} instance;

typedef struct fc_dynamic {
    fc_context *ctx; /* the caller's */
    fc_compile_options opts;
    fc_program *shell; /* the program the caller holds (signature, stats) */
    char *text;        /* the graph's text: what a specialization is compiled from */
    int nsyms;
    char *sym[FC_DYN_MAX_SYMS];
    fc_program *variant; /* NULL: none (unavailable says why) */
    char unavailable[160];
    instance inst[MAX_INSTANCES];
    /* The graph counters of the instances and specializations evicted so
     * far (the stats add up everything that ran). */
    fc_run_stats gone;
    int max_specs;
    /* The device and cuBLASLt handle the specializations borrow, and so
     * map their memory (runtime/cuda/program.h). */
    fc_device_lease *lease;

    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_t thread;
    bool thread_started, stop;
    spec **specs; /* under mu */
    int nspecs, capspecs;
    spec **graveyard; /* evicted entries: the thread frees them (under mu) */
    int ngrave, capgrave;
    uint64_t built, failed, evicted; /* under mu */
    /* The variant's arena size the background thread is asked to grow it
     * to ahead of need (0: none), and its growths so far (under mu). */
    int64_t arena_ahead;
    bool ahead_busy; /* the thread is growing it */
    uint64_t ahead_grows;
    double ahead_ms;

    uint64_t clock;
    int64_t last[FC_DYN_MAX_SYMS];
    bool have_last;
} fc_dynamic;

/* fc_compile is serialized process-wide: the background threads and the
 * callers share the compile cache and NVRTC's bookkeeping. */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;

static bool same_key(const int64_t *a, const int64_t *b, int n) { return !memcmp(a, b, sizeof *a * (size_t)n); }

static void key_text(const fc_dynamic *d, const int64_t *key, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < d->nsyms && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s=%lld", k ? "," : "", d->sym[k], (long long)key[k]);
}

/* Compile the specialization of key (in ctx, a context of its own); with
 * pointers of a run of that shape, also build its CUDA Graph. */
static fc_status compile_spec(fc_dynamic *d, const int64_t *key, fc_context *ctx, void *const *ptrs, int nin,
                              int nout, fc_program **out) {
    fc_binding b[FC_DYN_MAX_SYMS];
    for (int k = 0; k < d->nsyms; k++) b[k] = (fc_binding){d->sym[k], key[k]};
    double t = fc_now_ms();
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "<dynamic program>", d->text, strlen(d->text), NULL, b, d->nsyms, &g);
    if (st == FC_OK) {
        fc_compile_options o = d->opts;
        o.dynamic = false;
        o.sm = fc_program_sm(d->shell);
        pthread_mutex_lock(&compile_lock);
        st = fc_compile(g, &o, out);
        pthread_mutex_unlock(&compile_lock);
    }
    fc_graph_free(g);
    fc_trace(FC_LOG_SPEC, "%.3f..%.3f parse and compile", t, fc_now_ms());
    /* Load it now, off the caller's thread, when there is a GPU, and build
     * its graph, so that its first run replays (a failure here only means
     * the graph is built at its second run, as for any program). */
    if (st == FC_OK) fc_program_use_lease(*out, d->lease);
    if (st == FC_OK && fc_cuda_available(NULL) && fc_program_prepare(*out) == FC_OK && ptrs) {
        t = fc_now_ms();
        (void)fc_program_prebuild_graph(*out, ptrs, nin, ptrs + nin, nout);
        fc_trace(FC_LOG_SPEC, "%.3f..%.3f graph built and uploaded", t, fc_now_ms());
    }
    return st;
}

/* An entry, its program and its context. */
static void spec_free(spec *s) {
    if (!s) return;
    fc_program_free(s->prog);
    fc_context_free(s->ctx);
    free(s->ptrs);
    free(s);
}

/* Compile queued entry s, then wake whoever waits. Under mu on entry and
 * exit; released while compiling. The entry stays where it is: only the
 * caller's thread removes entries, and never one that is compiling. */
static void compile_entry(fc_dynamic *d, spec *s) {
    s->state = SPEC_COMPILING;
    /* Its context is made here, not when the caller queued it (the
     * caller's miss does as little as it can). */
    if (!s->ctx && !(s->ctx = fc_context_new())) {
        snprintf(s->error, sizeof s->error, "out of memory (a specialization's context)");
        s->state = SPEC_FAILED;
        d->failed++;
        pthread_cond_broadcast(&d->done);
        return;
    }
    int64_t key[FC_DYN_MAX_SYMS];
    memcpy(key, s->key, sizeof key);
    /* The entry stays, and only this thread changes it while COMPILING. */
    void **ptrs = s->ptrs;
    int nin = s->nin, nout = s->nout;
    pthread_mutex_unlock(&d->mu);
    fc_program *prog = NULL;
    const double t = fc_now_ms();
    fc_status st = compile_spec(d, key, s->ctx, ptrs, nin, nout, &prog);
    if (fc_trace_on(FC_LOG_SPEC)) {
        char k[160];
        key_text(d, key, k, sizeof k);
        fc_trace(FC_LOG_SPEC, "%.3f..%.3f specialization %s made", t, fc_now_ms(), k);
    }
    pthread_mutex_lock(&d->mu);
    if (st == FC_OK) {
        s->prog = prog;
        s->state = SPEC_READY;
        d->built++;
    } else {
        snprintf(s->error, sizeof s->error, "%.190s", fc_last_error(s->ctx));
        s->state = SPEC_FAILED;
        d->failed++;
    }
    pthread_cond_broadcast(&d->done);
}

static bool has_queued(const fc_dynamic *d) {
    for (int i = 0; i < d->nspecs; i++)
        if (d->specs[i]->state == SPEC_QUEUED) return true;
    return false;
}

static void *worker(void *arg) {
    fc_dynamic *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        if (d->arena_ahead > 0) {
            /* First: it is quick, and a run may soon need it. */
            const int64_t want = d->arena_ahead;
            d->arena_ahead = 0;
            d->ahead_busy = true;
            pthread_mutex_unlock(&d->mu);
            const double t0 = fc_now_ms();
            const bool grew = fc_program_arena_ahead(d->variant, want);
            const double ms = fc_now_ms() - t0;
            pthread_mutex_lock(&d->mu);
            if (grew) {
                d->ahead_grows++;
                d->ahead_ms += ms;
                fc_trace(FC_LOG_SPEC, "%.3f..%.3f the variant's arena grown ahead to %lld bytes", t0, t0 + ms,
                         (long long)want);
            }
            d->ahead_busy = false;
            pthread_cond_broadcast(&d->done);
            continue;
        }
        while (d->ngrave > 0) {
            spec *dead = d->graveyard[--d->ngrave];
            pthread_mutex_unlock(&d->mu);
            const double t = fc_now_ms();
            spec_free(dead);
            fc_trace(FC_LOG_SPEC, "%.3f..%.3f an evicted specialization freed", t, fc_now_ms());
            pthread_mutex_lock(&d->mu);
        }
        spec *s = NULL;
        for (int i = 0; i < d->nspecs && !s; i++)
            if (d->specs[i]->state == SPEC_QUEUED) s = d->specs[i];
        if (s) compile_entry(d, s);
        else if (d->stop) break;
        else pthread_cond_wait(&d->wake, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static spec *find_spec(fc_dynamic *d, const int64_t *key) {
    for (int i = 0; i < d->nspecs; i++)
        if (same_key(d->specs[i]->key, key, d->nsyms)) return d->specs[i];
    return NULL;
}

/* Room for one more entry in *list, of which n of *cap are used: doubled
 * when full. false when out of memory (the list is as it was). */
static bool list_room(spec ***list, int n, int *cap) {
    if (n < *cap) return true;
    const int c = *cap ? *cap * 2 : 8;
    spec **l = realloc(*list, sizeof *l * (size_t)c);
    if (!l) return false;
    *list = l;
    *cap = c;
    return true;
}

static void add_graph_stats(fc_run_stats *to, const fc_run_stats *from);

/* Remove entry i (under mu). Its program is freed by the background
 * thread, since freeing waits for the device; without one (synchronous or
 * no specialization), here. */
static bool bury(fc_dynamic *d, int i) {
    spec *s = d->specs[i];
    if (s->state == SPEC_READY) add_graph_stats(&d->gone, fc_program_stats_ref(s->prog));
    if (!d->thread_started) {
        spec_free(s);
    } else {
        if (!list_room(&d->graveyard, d->ngrave, &d->capgrave)) return false;
        d->graveyard[d->ngrave++] = s;
    }
    d->specs[i] = d->specs[--d->nspecs];
    return true;
}

/* Make room for one more entry: evict the least recently used ready one
 * when the table is full. False when every entry is still compiling (the
 * caller then does not queue). Under mu. */
static bool make_room(fc_dynamic *d) {
    if (d->nspecs < d->max_specs) return true;
    int lru = -1;
    for (int i = 0; i < d->nspecs; i++) {
        spec_state st = d->specs[i]->state;
        if (st != SPEC_READY && st != SPEC_FAILED) continue;
        if (lru < 0 || d->specs[i]->used < d->specs[lru]->used) lru = i;
    }
    if (lru < 0) return false;
    int64_t key[FC_DYN_MAX_SYMS];
    memcpy(key, d->specs[lru]->key, sizeof key);
    bool ready = d->specs[lru]->state == SPEC_READY;
    if (!bury(d, lru)) return false;
    if (ready) {
        d->evicted++;
        if (fc_trace_on(FC_LOG_GUARDS)) {
            char k[160];
            key_text(d, key, k, sizeof k);
            fc_trace(FC_LOG_GUARDS, "program %s: specialization %s evicted (least recently used of %d)",
                     fc_program_desc_of(d->shell)->graph_name, k, d->max_specs);
        }
    }
    return true; /* the caller wakes the background thread (it frees the entry) */
}

/* A new entry for key, queued (under mu), with the pointers of the run
 * that missed when there are some. NULL when out of memory. */
static spec *queue_spec(fc_dynamic *d, const int64_t *key, void *const *ptrs, int nin, int nout) {
    if (!list_room(&d->specs, d->nspecs, &d->capspecs)) return NULL;
    spec *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (ptrs && nin + nout > 0 && (s->ptrs = malloc(sizeof *ptrs * (size_t)(nin + nout)))) {
        /* Without them (out of memory) the graph is built at the 2nd run. */
        memcpy(s->ptrs, ptrs, sizeof *ptrs * (size_t)(nin + nout));
        s->nin = nin;
        s->nout = nout;
    }
    memcpy(s->key, key, sizeof *key * (size_t)d->nsyms);
    s->state = SPEC_QUEUED;
    s->used = d->clock;
    d->specs[d->nspecs++] = s;
    return s;
}

/* Why the guard missed, for the log: what changed since the last run. */
static void miss_reason(const fc_dynamic *d, const int64_t *key, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    if (!d->have_last) {
        char k[160];
        key_text(d, key, k, sizeof k);
        snprintf(buf, n, "first run (%s)", k);
        return;
    }
    for (int k = 0; k < d->nsyms && len < n; k++)
        if (key[k] != d->last[k])
            len += (size_t)snprintf(buf + len, n - len, "%s%s changed %lld -> %lld", len ? ", " : "", d->sym[k],
                                    (long long)d->last[k], (long long)key[k]);
    if (!len) snprintf(buf, n, "same shape as the last run, still no specialization");
}

/* An instance get_instance evicted (NULL: none): its graph counters kept
 * in d->gone, then freed. Returns the freeing's time, ms. */
static double retire_instance(fc_dynamic *d, fc_program *evicted) {
    if (!evicted) return 0;
    add_graph_stats(&d->gone, fc_program_stats_ref(evicted));
    const double t0 = fc_now_ms();
    fc_program_free(evicted);
    return fc_now_ms() - t0;
}

/* The variant's instance for key, made on first use (LRU of MAX_INSTANCES;
 * *made says whether it was made now). The instance it evicts goes to
 * *evicted, for the caller to free after its launches (retire_instance:
 * freeing one costs ~35 us of host time, which the GPU then hides). */
static fc_status get_instance(fc_dynamic *d, const int64_t *key, fc_program **out, fc_program **evicted, bool *made) {
    instance *slot = NULL;
    for (int i = 0; i < MAX_INSTANCES; i++) {
        instance *x = &d->inst[i];
        if (x->prog && same_key(x->key, key, d->nsyms)) {
            x->used = d->clock;
            *out = x->prog;
            return FC_OK;
        }
        if (!slot || !x->prog || (slot->prog && x->used < slot->used)) slot = x;
    }
    *evicted = slot->prog;
    *made = true;
    slot->prog = NULL;
    fc_status st = fc_program_instance(d->variant, key, d->nsyms, &slot->prog);
    if (st != FC_OK) return st;
    memcpy(slot->key, key, sizeof *key * (size_t)d->nsyms);
    slot->used = d->clock;
    *out = slot->prog;
    return FC_OK;
}

/* Copy the error of a program that ran in its own context to the caller's. */
static fc_status pass_error(fc_dynamic *d, fc_context *from, fc_status st) {
    if (from != d->ctx) fc_set_error(d->ctx, st, "%s", fc_last_error(from));
    return st;
}

/* ------------------------------------------------------------------ */
/* Compile, select, run.                                               */
/* ------------------------------------------------------------------ */

fc_status fc_dynamic_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    fc_context *ctx = g->ctx;
    if (g->nsyms > FC_DYN_MAX_SYMS)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "graph %s has %d symbols; a dynamic program takes at most %d",
                            g->name, g->nsyms, FC_DYN_MAX_SYMS);
    if (o->max_specializations < 0)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: max_specializations %d < 0", o->max_specializations);
    fc_program *p = fc_program_new_shell(ctx, o);
    fc_dynamic *d = calloc(1, sizeof *d);
    if (!p || !d) {
        free(d);
        fc_program_free(p);
        return FC_ERR_NOMEM;
    }
    fc_program_set_dynamic(p, d);
    d->ctx = ctx;
    d->opts = *o;
    d->shell = p;
    d->max_specs = o->max_specializations ? o->max_specializations : DEFAULT_MAX_SPECS;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->wake, NULL);
    pthread_cond_init(&d->done, NULL);
    fc_status st = fc_program_set_signature(p, g);
    if (st == FC_OK && !(d->lease = fc_device_lease_new())) st = FC_ERR_NOMEM;
    d->text = st == FC_OK ? fc_print(g) : NULL;
    if (st == FC_OK && !d->text) st = FC_ERR_NOMEM;
    d->nsyms = g->nsyms;
    for (int k = 0; k < g->nsyms && st == FC_OK; k++) {
        /* Every symbol must show in some parameter's shape: the guard binds
         * symbols from the inputs. */
        bool seen = false;
        for (int i = 0; i < g->nparams && !seen; i++)
            for (int q = 0; q < g->params[i]->rank; q++) seen |= g->params[i]->dims[q] == fc_dim_sym(k);
        if (!seen)
            st = fc_set_error(ctx, FC_ERR_INPUT,
                              "graph %s: symbol %s is in no parameter's shape, so no run could bind it (bind it at "
                              "compile time)",
                              g->name, g->syms[k]);
        else if (!(d->sym[k] = strdup(g->syms[k]))) st = FC_ERR_NOMEM;
    }
    if (st == FC_OK) {
        /* The dynamic variant. A graph it cannot express still compiles:
         * every new shape is then specialized before it runs (the stats
         * and the log say why). */
        fc_status vs = fc_program_compile_variant(g, o, &d->variant);
        if (vs == FC_ERR_NOMEM) st = vs;
        else if (vs != FC_OK) {
            snprintf(d->unavailable, sizeof d->unavailable, "%.150s", fc_last_error(ctx));
            fc_trace(FC_LOG_GUARDS, "program %s: no dynamic variant: %s", g->name, d->unavailable);
            fc_clear_error(ctx);
        }
    }
    if (st == FC_OK && o->specialize == FC_SPECIALIZE_BACKGROUND) {
        if (pthread_create(&d->thread, NULL, worker, d) != 0)
            st = fc_set_error(ctx, FC_ERR_RUNTIME, "fc_compile: cannot start the specialization thread");
        else d->thread_started = true;
    }
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    *out = p;
    return FC_OK;
}

fc_program *fc_dynamic_variant(const fc_dynamic *d) { return d ? d->variant : NULL; }

fc_status fc_program_reserve(fc_program *p, const fc_binding *largest, int n) {
    if (!p) return FC_ERR_USAGE;
    fc_dynamic *d = fc_program_dynamic(p);
    if (!d) return FC_OK; /* a static program: its memory is its shape's */
    if (n < 0 || (n > 0 && !largest)) return fc_set_error(d->ctx, FC_ERR_USAGE, "fc_program_reserve: no bindings");
    int64_t key[FC_DYN_MAX_SYMS];
    for (int k = 0; k < d->nsyms; k++) key[k] = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < d->nsyms && (!largest[i].name || strcmp(largest[i].name, d->sym[k]))) k++;
        if (k == d->nsyms)
            return fc_set_error(d->ctx, FC_ERR_USAGE, "fc_program_reserve: the graph has no symbol %s",
                                largest[i].name ? largest[i].name : "(NULL)");
        if (largest[i].value < 1)
            return fc_set_error(d->ctx, FC_ERR_USAGE, "fc_program_reserve: %s = %lld: sizes must be at least 1",
                                d->sym[k], (long long)largest[i].value);
        key[k] = largest[i].value;
    }
    for (int k = 0; k < d->nsyms; k++)
        if (!key[k]) return fc_set_error(d->ctx, FC_ERR_USAGE, "fc_program_reserve: symbol %s is not given", d->sym[k]);
    if (!d->variant) return FC_OK;
    fc_status st = fc_program_reserve_arena(d->variant, key, d->nsyms);
    if (st != FC_OK) return st;
    /* And the variant's graph, from the largest shape's instance (kept:
     * a shape like any other), so that the first run only replays it. */
    fc_program *inst = NULL, *evicted = NULL;
    bool made = false;
    st = get_instance(d, key, &inst, &evicted, &made);
    retire_instance(d, evicted);
    if (st != FC_OK) return st;
    return fc_program_prebuild_shared_graph(inst);
}

void fc_dynamic_free(fc_dynamic *d) {
    if (!d) return;
    if (d->thread_started) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_broadcast(&d->wake);
        pthread_mutex_unlock(&d->mu);
        /* It finishes the compile it is in, frees the graveyard, and ends;
         * queued entries are dropped below. */
        pthread_join(d->thread, NULL);
    }
    for (int i = 0; i < d->ngrave; i++) spec_free(d->graveyard[i]);
    for (int i = 0; i < d->nspecs; i++) spec_free(d->specs[i]);
    fc_device_lease_free(d->lease); /* after every specialization */
    for (int i = 0; i < MAX_INSTANCES; i++) fc_program_free(d->inst[i].prog);
    fc_program_free(d->variant);
    for (int k = 0; k < d->nsyms; k++) free(d->sym[k]);
    free(d->specs);
    free(d->graveyard);
    free(d->text);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->wake);
    pthread_cond_destroy(&d->done);
    free(d);
}

/* Compile key's specialization on the caller's thread (FC_SPECIALIZE_SYNC,
 * or no variant to fall back on). Under mu on entry and exit. */
static spec *compile_now(fc_dynamic *d, const int64_t *key) {
    spec *s = find_spec(d, key);
    if (!s) {
        if (!make_room(d)) return NULL;
        if (!(s = queue_spec(d, key, NULL, 0, 0))) return NULL;
    }
    while (s->state == SPEC_COMPILING) pthread_cond_wait(&d->done, &d->mu);
    if (s->state == SPEC_QUEUED) compile_entry(d, s);
    return s;
}

/* Queue a specialization of key (under mu), evicting the least recently
 * used one if the table is full, and log the miss (why: its reason). */
static void queue_miss(fc_dynamic *d, const int64_t *key, void *const *ptrs, int nin, int nout, const char *why) {
    const char *name = fc_program_desc_of(d->shell)->graph_name;
    char k[160] = "";
    if (fc_trace_on(FC_LOG_GUARDS)) key_text(d, key, k, sizeof k);
    if (find_spec(d, key)) {
        /* Queued meanwhile by a run on another thread. */
        fc_trace(FC_LOG_GUARDS, "program %s: guard miss: %s; this run uses the dynamic variant (its specialization "
                 "is already queued)", name, why);
    } else if (make_room(d) && queue_spec(d, key, ptrs, nin, nout)) {
        fc_trace(FC_LOG_GUARDS,
                 "program %s: guard miss: %s; this run uses the dynamic variant, the specialization %s is "
                 "compiling in the background",
                 name, why, k);
    } else {
        fc_trace(FC_LOG_GUARDS,
                 "program %s: guard miss: %s; this run uses the dynamic variant (all %d specialization slots "
                 "are compiling: %s not queued)",
                 name, why, d->max_specs, k);
    }
}

/* Whether the background thread has work (under mu): a queued entry, or an
 * evicted one to free (the table changes only under mu, so it cannot miss
 * it). */
static bool thread_has_work(fc_dynamic *d) { return d->thread_started && (d->ngrave > 0 || has_queued(d)); }

/* What select_spec leaves to its caller for after the run's launches. */
typedef struct miss_after {
    bool queue; /* queue a specialization of the run's key (queue_after) */
    bool wake;  /* wake the background thread */
    char why[240];
} miss_after;

/* fc_dynamic_select, with the run's pointers (inputs, then outputs; NULL
 * for none) for a specialization it queues, and the time (ms) the guard
 * check began, for a miss's miss_guard_ms. With `after` (a run), a miss
 * that background specialization serves with the variant queues nothing
 * here: the caller launches the variant first and then calls queue_after,
 * so that the queueing (an allocation, an eviction, the log) and the
 * wake-up of the background thread (a system call) come after the work is
 * on the GPU. Without it (fc_dynamic_select) everything happens here. */
static fc_status select_spec(fc_program *p, const int64_t *key, void *const *ptrs, int nin, int nout, double t0,
                             fc_program **out, miss_after *after) {
    fc_dynamic *d = fc_program_dynamic(p);
    *out = NULL;
    if (!d) return FC_ERR_USAGE;
    fc_run_stats *rs = fc_program_stats_ref(p);
    const char *name = fc_program_desc_of(p)->graph_name;
    d->clock++;
    pthread_mutex_lock(&d->mu);
    spec *s = find_spec(d, key);
    if (s && s->state == SPEC_READY) {
        s->used = d->clock;
        rs->guard_hits++;
        *out = s->prog;
        pthread_mutex_unlock(&d->mu);
        memcpy(d->last, key, sizeof *key * (size_t)d->nsyms);
        d->have_last = true;
        return FC_OK;
    }
    rs->guard_misses++;
    /* The log's text, only when it is asked for: with specialization off
     * every run of the variant is a miss. */
    char why[240] = "", k[160] = "";
    if (fc_trace_on(FC_LOG_GUARDS)) miss_reason(d, key, why, sizeof why);
    if (fc_trace_on(FC_LOG_GUARDS) || d->opts.specialize == FC_SPECIALIZE_SYNC || !d->variant)
        key_text(d, key, k, sizeof k);
    fc_status st = FC_OK;
    bool need_sync = d->opts.specialize == FC_SPECIALIZE_SYNC || !d->variant;
    if (need_sync && (!s || s->state != SPEC_FAILED)) {
        fc_trace(FC_LOG_GUARDS, "program %s: guard miss: %s; compiling the specialization %s now (%s)", name, why, k,
               d->variant ? "synchronous specialization was asked for" : "there is no dynamic variant");
        rs->sync_compiles++;
        s = compile_now(d, key);
        if (!s) st = fc_set_error(d->ctx, FC_ERR_NOMEM, "out of memory (specialization table)");
        else if (s->state == SPEC_READY) {
            s->used = d->clock;
            *out = s->prog;
        } else if (!d->variant) {
            st = fc_set_error(d->ctx, FC_ERR_RUNTIME, "program %s: specializing %s failed: %s", name, k, s->error);
        }
    } else if (!s && d->opts.specialize == FC_SPECIALIZE_BACKGROUND) {
        if (after) {
            after->queue = true;
            snprintf(after->why, sizeof after->why, "%s", why);
        } else {
            queue_miss(d, key, ptrs, nin, nout, why);
        }
    } else {
        fc_trace(FC_LOG_GUARDS, "program %s: guard miss: %s; this run uses the dynamic variant (%s)", name, why,
               !s                       ? "specialization is off"
               : s->state == SPEC_FAILED ? s->error
                                         : "its specialization is still compiling");
    }
    const bool work = thread_has_work(d);
    pthread_mutex_unlock(&d->mu);
    if (after) after->wake = work;
    else if (work) pthread_cond_signal(&d->wake);
    memcpy(d->last, key, sizeof *key * (size_t)d->nsyms);
    d->have_last = true;
    rs->miss_guard_ms += fc_now_ms() - t0;
    return st;
}

/* The queueing select_spec left for after a run's launches (a->queue),
 * counted in miss_guard_ms; then the background thread is woken if it has
 * work. */
static void queue_after(fc_program *p, fc_dynamic *d, const int64_t *key, void *const *ptrs, int nin, int nout,
                        miss_after *a) {
    if (a->queue) {
        const double t0 = fc_now_ms();
        pthread_mutex_lock(&d->mu);
        queue_miss(d, key, ptrs, nin, nout, a->why);
        a->wake |= thread_has_work(d);
        pthread_mutex_unlock(&d->mu);
        fc_program_stats_ref(p)->miss_guard_ms += fc_now_ms() - t0;
    }
    if (a->wake) pthread_cond_signal(&d->wake);
}

fc_status fc_dynamic_select(fc_program *p, const int64_t *key, fc_program **out) {
    return select_spec(p, key, NULL, 0, 0, fc_now_ms(), out, NULL);
}

fc_status fc_dynamic_weights_changed(fc_dynamic *d) {
    /* The variant's instances share its cuBLASLt handle. */
    if (d->variant) (void)fc_program_weights_changed(d->variant);
    /* A specialization still compiling has copied nothing yet: its first
     * run reads the weights as they are then. */
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->nspecs; i++)
        if (d->specs[i]->state == SPEC_READY) (void)fc_program_weights_changed(d->specs[i]->prog);
    pthread_mutex_unlock(&d->mu);
    return FC_OK;
}

/* The counters the background thread keeps, into the program's stats. */
static void sync_stats(fc_dynamic *d, fc_run_stats *rs) {
    pthread_mutex_lock(&d->mu);
    rs->specializations_built = d->built;
    rs->specializations_failed = d->failed;
    rs->specializations_evicted = d->evicted;
    rs->arena_grows_ahead = d->ahead_grows;
    rs->arena_ahead_ms = d->ahead_ms;
    int live = 0, pending = 0;
    for (int i = 0; i < d->nspecs; i++) {
        live += d->specs[i]->state == SPEC_READY;
        pending += d->specs[i]->state == SPEC_QUEUED || d->specs[i]->state == SPEC_COMPILING;
    }
    rs->specializations_live = live;
    rs->specializations_pending = pending;
    pthread_mutex_unlock(&d->mu);
    snprintf(rs->dynamic_unavailable, sizeof rs->dynamic_unavailable, "%s", d->unavailable);
}

static void add_graph_stats(fc_run_stats *to, const fc_run_stats *from) {
    to->graph_captures += from->graph_captures;
    to->graph_prebuilt += from->graph_prebuilt;
    to->graph_build_ms += from->graph_build_ms;
    to->graph_replays += from->graph_replays;
    to->graph_patches += from->graph_patches;
    to->frame_writes += from->frame_writes;
    to->graph_skips += from->graph_skips;
    if (from->graph_skip_reason[0])
        snprintf(to->graph_skip_reason, sizeof to->graph_skip_reason, "%s", from->graph_skip_reason);
}

void fc_cuda_program_stats(const fc_program *cp, fc_run_stats *out) {
    fc_program *p = (fc_program *)cp;
    *out = *fc_program_stats_ref(p);
    fc_dynamic *d = fc_program_dynamic(p);
    if (!d) return;
    sync_stats(d, out);
    /* Graph counters of everything that ran: the shell itself runs nothing. */
    out->graph_captures = out->graph_replays = out->graph_patches = out->graph_skips = out->graph_prebuilt = 0;
    out->frame_writes = 0;
    out->graph_build_ms = 0;
    out->graph_skip_reason[0] = 0;
    add_graph_stats(out, &d->gone);
    if (d->variant) {
        /* The arena is the variant's (its instances share it). */
        out->arena_grows = fc_program_stats_ref(d->variant)->arena_grows;
        out->arena_grow_ms = fc_program_stats_ref(d->variant)->arena_grow_ms;
    }
    for (int i = 0; i < MAX_INSTANCES; i++)
        if (d->inst[i].prog) add_graph_stats(out, fc_program_stats_ref(d->inst[i].prog));
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->nspecs; i++)
        if (d->specs[i]->state == SPEC_READY) add_graph_stats(out, fc_program_stats_ref(d->specs[i]->prog));
    pthread_mutex_unlock(&d->mu);
}

fc_status fc_program_wait_specializations(fc_program *p) {
    fc_dynamic *d = fc_program_dynamic(p);
    if (!d) return p ? FC_OK : FC_ERR_USAGE;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        /* Its growth of the arena ahead of need too. */
        bool pending = d->arena_ahead > 0 || d->ahead_busy;
        for (int i = 0; i < d->nspecs; i++)
            pending |= d->specs[i]->state == SPEC_QUEUED || d->specs[i]->state == SPEC_COMPILING;
        if (!pending || !d->thread_started) break;
        pthread_cond_wait(&d->done, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return FC_OK;
}

/* launch_dynamic's launches: spec's, or the variant's instance for key. */
static fc_status launch_selected(fc_program *p, fc_dynamic *d, const int64_t *key, void *const *buf, int nin,
                                 int nout, void *stream, fc_program *spec, bool *wake) {
    const fc_program_desc *sig = fc_program_desc_of(p);
    fc_status st = FC_OK;
    fc_run_stats *rs = fc_program_stats_ref(p);
    if (spec) {
        st = fc_run(spec, buf, nin, buf + nin, nout, stream);
        if (st != FC_OK) return pass_error(d, fc_program_context(spec), st);
        rs->runs++;
        return FC_OK;
    }
    if (!d->variant) {
        char k[160];
        key_text(d, key, k, sizeof k);
        return fc_set_error(d->ctx, FC_ERR_RUNTIME,
                            "program %s: no specialization for %s could be built, and there is no dynamic variant "
                            "(%s)",
                            sig->graph_name, k, d->unavailable);
    }
    fc_program *inst = NULL, *evicted = NULL;
    bool made = false;
    double t0 = fc_now_ms();
    st = get_instance(d, key, &inst, &evicted, &made);
    double setup = fc_now_ms() - t0;
    if (st == FC_OK) st = fc_run(inst, buf, nin, buf + nin, nout, stream);
    setup += retire_instance(d, evicted);
    if (made) rs->shape_setup_ms += setup; /* a lookup is not counted */
    if (st != FC_OK) return st;
    /* A new shape: the background thread grows the arena ahead of the
     * next larger one, so that the run that needs the memory finds it
     * mapped (a growth costs a run ~100 us of host time; docs/DYNAMIC.md). */
    int64_t ahead = made && d->thread_started ? fc_program_arena_ahead_bytes(inst) : 0;
    if (ahead > 0) {
        pthread_mutex_lock(&d->mu);
        if (ahead > d->arena_ahead) d->arena_ahead = ahead;
        pthread_mutex_unlock(&d->mu);
        *wake = true;
    }
    rs->runs++;
    rs->dynamic_runs++;
    return FC_OK;
}

/* The launches of a dynamic program's run (run_dynamic), which began at
 * `began` (ms). */
static fc_status launch_dynamic(fc_program *p, fc_dynamic *d, const int64_t *key, void *const *buf, int nin, int nout,
                                void *stream, double began) {
    fc_program *spec = NULL;
    miss_after after; /* (no zeroing of why on every run: select_spec sets it where it queues) */
    after.queue = after.wake = false;
    fc_status st = select_spec(p, key, buf, nin, nout, began, &spec, &after);
    if (st == FC_OK) st = launch_selected(p, d, key, buf, nin, nout, stream, spec, &after.wake);
    /* After the launches, even if they failed (the shape is still worth
     * specializing). */
    queue_after(p, d, key, buf, nin, nout, &after);
    return st;
}

/* A dynamic program's run with the call's pointers (buf: inputs, then
 * outputs, fc_run's convention) and its symbol values; a miss's host time
 * is counted (miss_run_ms). */
static fc_status run_dynamic(fc_program *p, fc_dynamic *d, const int64_t *key, void *const *buf, int nin, int nout,
                             void *stream) {
    fc_run_stats *rs = fc_program_stats_ref(p);
    const uint64_t misses = rs->guard_misses;
    const double t0 = fc_now_ms();
    fc_status st = launch_dynamic(p, d, key, buf, nin, nout, stream, t0);
    if (rs->guard_misses != misses) rs->miss_run_ms += fc_now_ms() - t0;
    return st;
}

fc_status fc_cuda_run_shaped(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                             void *stream) {
    fc_dynamic *d = fc_program_dynamic(p);
    fc_context *ctx = fc_program_context(p);
    const fc_program_desc *sig = fc_program_desc_of(p);
    int64_t key[FC_DYN_MAX_SYMS];
    fc_status st = fc_guard_bind(ctx, sig, d ? (const char *const *)d->sym : NULL, d ? d->nsyms : 0, inputs, nin,
                                 outputs, nout, true, key);
    if (st != FC_OK) return st;
    if (nout > 0 && !outputs) return fc_set_error(ctx, FC_ERR_USAGE, "fc_run_shaped: outputs is NULL");
    /* The pointers in fc_run's convention. */
    void *small[64];
    void **buf = nin + nout <= (int)(sizeof small / sizeof small[0]) ? small : malloc(sizeof(void *) * (size_t)(nin + nout));
    if (!buf) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nin; i++) buf[i] = inputs[i].data;
    for (int k = 0; k < nout; k++) buf[nin + k] = outputs[k].data;
    st = d ? run_dynamic(p, d, key, buf, nin, nout, stream) : fc_run(p, buf, nin, buf + nin, nout, stream);
    if (buf != small) free(buf);
    return st;
}

fc_status fc_program_infer_outputs(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout) {
    if (!p) return FC_ERR_USAGE;
    fc_dynamic *d = fc_program_dynamic(p);
    const fc_program_desc *sig = fc_program_desc_of(p);
    int64_t key[FC_DYN_MAX_SYMS];
    fc_status st = fc_guard_bind(fc_program_context(p), sig, d ? (const char *const *)d->sym : NULL, d ? d->nsyms : 0,
                                 inputs, nin, NULL, nout, false, key);
    if (st != FC_OK) return st;
    for (int o = 0; o < nout; o++) {
        const fc_program_tensor *t = &sig->outputs[o];
        memset(&outputs[o], 0, sizeof outputs[o]);
        outputs[o].dtype = t->dtype;
        outputs[o].rank = t->rank;
        for (int q = 0; q < t->rank; q++)
            outputs[o].shape[q] = fc_dim_value(t->dims[q], key);
    }
    return FC_OK;
}
