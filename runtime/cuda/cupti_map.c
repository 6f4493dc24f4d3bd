/* cupti_map.c - a capture's records as a profile's events (cupti.h): a launch-by-launch record by its tag, a replay's kernels by their order in the graph, checked by name. */
#include "runtime/cuda/cupti.h"
#include "ir/ir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_ext(const void *a, const void *b) {
    const fc_cupti_ext *x = a, *y = b;
    return (x->correlation > y->correlation) - (x->correlation < y->correlation);
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The tag of correlation id c (0: none). */
static uint64_t tag_of(const fc_cupti_ext *e, int ne, uint32_t c) {
    const fc_cupti_ext key = {c, 0};
    const fc_cupti_ext *f = ne > 0 ? bsearch(&key, e, (size_t)ne, sizeof *e, cmp_ext) : NULL;
    return f ? f->id : 0;
}

/* The measured run whose span holds t, or -1. */
static int run_at(const fc_profile_rec *r, double t) {
    int lo = 0, hi = r->runs - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (t < r->run_start[mid]) hi = mid - 1;
        else if (t > r->run_end[mid]) lo = mid + 1;
        else return mid;
    }
    return -1;
}

/* The run and launch (FC_CUPTI_REPLAY: a replay) that correlation id c's
 * tag names; false for no tag, or a run that is neither measured nor
 * learn. */
static bool tagged(const fc_profile_rec *r, int learn, const fc_cupti_ext *e, int ne, uint32_t c, int *run,
                   int *launch) {
    const uint64_t tag = tag_of(e, ne, c);
    const uint64_t k = tag >> FC_CUPTI_RUN_SHIFT;
    if (k == 0 || k > (uint64_t)INT_MAX) return false;
    *run = (int)(k - 1);
    *launch = (int)(tag & FC_CUPTI_REPLAY);
    if (*run >= r->runs && *run != learn) return false;
    return *launch == (int)FC_CUPTI_REPLAY || *launch < r->nlaunches;
}

/* Kernel x's run and launch: by its tag, else, a graph's kernel, the
 * measured run it ran in, as a replay. */
static bool kernel_of(const fc_profile_rec *r, int learn, const fc_cupti_ext *e, int ne, const fc_cupti_kernel *x,
                      int *run, int *launch) {
    if (tagged(r, learn, e, ne, x->correlation, run, launch)) return true;
    if (!x->graph || tag_of(e, ne, x->correlation)) return false;
    *run = run_at(r, x->start);
    *launch = (int)FC_CUPTI_REPLAY;
    return *run >= 0;
}

/* Whether launch f is a node of the graph (a view runs nothing; a
 * load-time launch runs before the graph, when the weights change). */
static bool in_graph(const fc_profile_info *f) { return f->kind != FC_LAUNCH_ALIAS && !f->loadtime; }

/* A replay's kernel: its record, and where it ran in the run. */
typedef struct ord {
    int run, rec;
    double start, end;
} ord;

static int cmp_ord(const void *a, const void *b) {
    const ord *x = a, *y = b;
    if (x->run != y->run) return x->run - y->run;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->rec - y->rec;
}

/* What the run launch by launch said: launch l ran count[l] kernels,
 * named as k[rec[first[l] + 0 .. count[l]-1]] in start order. */
typedef struct learned {
    const int *count, *first, *rec;
} learned;

static const char *learned_name(const fc_cupti_kernel *k, const learned *L, int l, int i) {
    return k[L->rec[L->first[l] + i]].name;
}

/* The library launch after l and before q that is in the graph, or q. */
static int next_library(const fc_profile_rec *r, int l, int q) {
    for (l++; l < q; l++)
        if (in_graph(&r->launches[l]) && r->launches[l].kind == FC_LAUNCH_LIBRARY) return l;
    return q;
}

/* Kernels o[0 .. n) of library calls i .. q-1 (one after another) into
 * launch_of, by the names the run launch by launch gave each: a kernel
 * of the next call's first name, once the current call's names are all
 * seen, starts the next call; a kernel that call did not run (a memset
 * node reported as a kernel) goes with the call it follows. False when
 * not every call's kernels were seen in order. */
static bool split_libraries(const fc_profile_rec *r, const fc_cupti_kernel *k, const ord *o, int n, const learned *L,
                            int i, int q, int *launch_of) {
    int cur = i, seen = 0, last = i;
    for (int l = i; l < q; l = next_library(r, l, q))
        if (L->count[l] > 0) last = l;
    for (int j = 0; j < n; j++) {
        const char *name = k[o[j].rec].name;
        if (seen < L->count[cur] && !strcmp(name, learned_name(k, L, cur, seen))) {
            seen++;
        } else if (seen == L->count[cur]) {
            int nx = next_library(r, cur, q);
            while (nx < q && L->count[nx] == 0) nx = next_library(r, nx, q);
            if (nx < q && !strcmp(name, learned_name(k, L, nx, 0))) {
                cur = nx;
                seen = 1;
            }
        }
        launch_of[j] = cur;
    }
    return cur == last && seen == L->count[cur];
}

/* The launch of each of one replay's n kernels (o, in start order) into
 * launch_of; false with why when they do not match the launches. L: what
 * the run launch by launch said (NULL: no such run). */
static bool match_replay(const fc_profile_rec *r, const fc_cupti_kernel *k, const ord *o, int n, const learned *L,
                         int *launch_of, char *why, size_t nwhy) {
    const int run = n > 0 ? o[0].run : 0;
    int j = 0;
    for (int i = 0; i < r->nlaunches;) {
        const fc_profile_info *f = &r->launches[i];
        if (!in_graph(f)) {
            i++;
            continue;
        }
        if (f->kind != FC_LAUNCH_LIBRARY) {
            /* A generated kernel: one record, of its function. */
            if (j >= n) {
                snprintf(why, nwhy, "the replay of run %d ran %d kernels and none of launch %d (%s)", run, n, i, f->name);
                return false;
            }
            if (strcmp(k[o[j].rec].name, f->name) != 0) {
                snprintf(why, nwhy, "kernel %d of the replay of run %d is %.60s where launch %d runs %s", j, run,
                         k[o[j].rec].name, i, f->name);
                return false;
            }
            launch_of[j++] = i++;
            continue;
        }
        /* Library calls up to the next generated kernel (or the end): the
         * kernels before that kernel's record are theirs. */
        int q = i, nlib = 0, want = 0, last = i;
        const char *anchor = NULL;
        for (; q < r->nlaunches; q++) {
            const fc_profile_info *g = &r->launches[q];
            if (!in_graph(g)) continue;
            if (g->kind != FC_LAUNCH_LIBRARY) {
                anchor = g->name;
                break;
            }
            nlib++;
            last = q;
            if (L) want += L->count[q];
        }
        int end = j;
        while (end < n && !(anchor && !strcmp(k[o[end].rec].name, anchor))) end++;
        if (end == j && (!L || want > 0)) {
            snprintf(why, nwhy, "launch %d (%s) ran no kernel in the replay of run %d", i, f->name, run);
            return false;
        }
        if (nlib == 1) {
            for (; j < end; j++) launch_of[j] = i;
        } else if (!L) {
            snprintf(why, nwhy, "launches %d to %d are library calls one after another and no run launch by launch "
                     "says which of their %d kernels is whose", i, last, end - j);
            return false;
        } else if (!split_libraries(r, k, o + j, end - j, L, i, q, launch_of + j)) {
            snprintf(why, nwhy, "launches %d to %d (library calls) ran %d kernels in the replay of run %d, not the %d "
                     "they ran launch by launch in order", i, last, end - j, run, want);
            return false;
        }
        j = end;
        i = q;
    }
    if (j != n) {
        snprintf(why, nwhy, "the replay of run %d ran %d kernels after its last launch's (%.60s first)", run, n - j,
                 k[o[j].rec].name);
        return false;
    }
    return true;
}

/* A device event for kernel record k, as launch `launch` of run `run`. */
static bool device_event(fc_profile_rec *r, const fc_cupti_kernel *k, int run, int launch, int flow) {
    fc_profile_event *ev = fc_profile_rec_event(r, FC_TRACK_DEVICE, run, launch, k->start, k->end);
    if (!ev) return false;
    ev->flow = flow;
    snprintf(ev->name, sizeof ev->name, "%s", k->name);
    return true;
}

/* The replays' kernels (o, sorted) as events, one run at a time. */
static fc_status map_replays(fc_profile_rec *r, const fc_cupti_kernel *k, const ord *o, int no, const learned *L,
                             char *why, size_t nwhy) {
    int *launch_of = malloc(sizeof *launch_of * (size_t)(no + 1));
    if (!launch_of) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int a = 0; a < no && !why[0];) {
        int b = a;
        while (b < no && o[b].run == o[a].run) b++;
        if (match_replay(r, k, o + a, b - a, L, launch_of, why, nwhy))
            for (int j = a; j < b; j++)
                /* One call launched them all: the flow joins it to the first. */
                if (!device_event(r, &k[o[j].rec], o[j].run, launch_of[j - a], j == a ? (int)k[o[j].rec].correlation : 0)) {
                    free(launch_of);
                    return FC_ERR_NOMEM;
                }
        a = b;
    }
    free(launch_of);
    return FC_OK;
}

/* A measured run that replayed (every one, when replays) and whose
 * kernels have no record, in a program that has some: why says which. */
static fc_status replays_seen(const fc_profile_rec *r, bool replays, const ord *o, int no, char *why, size_t nwhy) {
    bool any = false;
    for (int i = 0; i < r->nlaunches && !any; i++) any = in_graph(&r->launches[i]);
    if (!replays || !any) return FC_OK;
    bool *seen = calloc((size_t)r->runs + 1, sizeof *seen);
    if (!seen) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int j = 0; j < no; j++) seen[o[j].run] = true;
    for (int k = 0; k < r->runs; k++)
        if (!seen[k]) {
            snprintf(why, nwhy, "CUPTI recorded no kernel of the replay of run %d", k);
            break;
        }
    free(seen);
    return FC_OK;
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The driver and runtime calls of the measured runs as host events; a call that
 * launched a device event with a flow (events[0 .. dev_end)) starts it. */
static fc_status host_events(fc_profile_rec *r, int learn, const fc_cupti_records *rec, int dev_end) {
    int *kf = malloc(sizeof *kf * (size_t)(dev_end + 1));
    if (!kf) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    int nkf = 0;
    for (int i = 0; i < dev_end; i++)
        if (r->events[i].flow > 0) kf[nkf++] = r->events[i].flow;
    qsort(kf, (size_t)nkf, sizeof *kf, cmp_int);
    for (int i = 0; i < rec->na; i++) {
        const fc_cupti_api *a = &rec->a[i];
        int run, launch;
        if (!tagged(r, learn, rec->e, rec->ne, a->correlation, &run, &launch) || run >= r->runs) continue;
        const bool replay = launch == (int)FC_CUPTI_REPLAY;
        fc_profile_event *ev = fc_profile_rec_event(r, FC_TRACK_HOST, run, replay ? -1 : launch, a->start, a->end);
        if (!ev) {
            free(kf);
            return FC_ERR_NOMEM;
        }
        const int c = (int)a->correlation;
        if (nkf > 0 && bsearch(&c, kf, (size_t)nkf, sizeof *kf, cmp_int)) ev->flow = c;
        snprintf(ev->name, sizeof ev->name, "%.60s (%s call %u)", replay ? "graph replay" : r->launches[launch].name,
                 a->runtime ? "runtime" : "driver", a->cbid);
    }
    free(kf);
    return FC_OK;
}

fc_status fc_cupti_map(fc_profile_rec *r, int learn, bool replays, fc_cupti_records *rec, char *why, size_t nwhy) {
    const fc_cupti_kernel *k = rec->k;
    const fc_cupti_ext *e = rec->e;
    const int nk = rec->nk, ne = rec->ne;
    why[0] = 0;
    if (ne > 0) qsort(rec->e, (size_t)ne, sizeof *rec->e, cmp_ext);
    const int base = r->nevents;
    /* o: the replays' kernels; lo: the learned run's, by launch (in run). */
    ord *o = malloc(sizeof *o * (size_t)(nk + 1)), *lo = malloc(sizeof *lo * (size_t)(nk + 1));
    int *count = calloc(2 * (size_t)r->nlaunches + 1, sizeof *count), *lrec = malloc(sizeof *lrec * (size_t)(nk + 1));
    uint32_t *flows = malloc(sizeof *flows * (size_t)(rec->na + 1));
    fc_status st = o && lo && count && lrec && flows ? FC_OK : fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    int no = 0, nlo = 0;
    for (int i = 0; i < nk && st == FC_OK; i++) {
        int run, launch;
        if (!kernel_of(r, learn, e, ne, &k[i], &run, &launch)) continue;
        if (launch == (int)FC_CUPTI_REPLAY) {
            if (run < r->runs) o[no++] = (ord){run, i, k[i].start, k[i].end};
        } else if (run == learn) {
            lo[nlo++] = (ord){launch, i, k[i].start, k[i].end};
            count[launch]++;
        } else if (!device_event(r, &k[i], run, launch, (int)k[i].correlation)) st = FC_ERR_NOMEM;
    }
    if (st == FC_OK && no > 0) {
        qsort(o, (size_t)no, sizeof *o, cmp_ord);
        qsort(lo, (size_t)nlo, sizeof *lo, cmp_ord);
        int *first = count + r->nlaunches;
        for (int l = 0, at = 0; l < r->nlaunches; l++) {
            first[l] = at;
            at += count[l];
        }
        for (int i = 0; i < nlo; i++) lrec[i] = lo[i].rec;
        const learned L = {count, first, lrec};
        st = map_replays(r, k, o, no, nlo > 0 ? &L : NULL, why, nwhy);
    }
    if (st == FC_OK && !why[0]) st = replays_seen(r, replays, o, no, why, nwhy);
    if (st == FC_OK && !why[0]) {
        const int dev_end = r->nevents;
        st = host_events(r, learn, rec, dev_end);
        /* A flow that no driver call starts (a capture without calls) is
         * none. */
        int nflows = 0;
        for (int i = dev_end; st == FC_OK && i < r->nevents; i++)
            if (r->events[i].flow > 0) flows[nflows++] = (uint32_t)r->events[i].flow;
        qsort(flows, (size_t)nflows, sizeof *flows, cmp_u32);
        for (int i = base; st == FC_OK && i < dev_end; i++) {
            const uint32_t f = (uint32_t)r->events[i].flow;
            if (f && !(nflows > 0 && bsearch(&f, flows, (size_t)nflows, sizeof *flows, cmp_u32))) r->events[i].flow = 0;
        }
    }
    if (st != FC_OK || why[0]) r->nevents = base;
    free(o);
    free(lo);
    free(count);
    free(lrec);
    free(flows);
    return st;
}
