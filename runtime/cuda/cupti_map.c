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

/* The run and launch (FC_CUPTI_REPLAY: a replay) correlation id c's tag
 * names; false for no tag, or a run that is neither measured nor learn. */
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

/* The launch of each of one replay's n kernels (o, in start order) into
 * launch_of; false with why when they do not match the launches. learned:
 * each launch's kernel count launch by launch (NULL: no such run). */
static bool match_replay(const fc_profile_rec *r, const fc_cupti_kernel *k, const ord *o, int n, const int *learned,
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
            if (learned) want += learned[q];
        }
        int end = j;
        while (end < n && !(anchor && !strcmp(k[o[end].rec].name, anchor))) end++;
        if (end == j && (!learned || want > 0)) {
            snprintf(why, nwhy, "launch %d (%s) ran no kernel in the replay of run %d", i, f->name, run);
            return false;
        }
        if (nlib == 1) {
            for (; j < end; j++) launch_of[j] = i;
        } else if (!learned) {
            snprintf(why, nwhy, "launches %d to %d are library calls one after another and no run launch by launch "
                     "says which of their %d kernels is whose", i, last, end - j);
            return false;
        } else if (want != end - j) {
            snprintf(why, nwhy, "launches %d to %d (library calls) ran %d kernels in the replay of run %d and %d "
                     "launch by launch", i, last, end - j, run, want);
            return false;
        } else {
            for (int l = i; l < q; l++)
                for (int c = 0; in_graph(&r->launches[l]) && c < learned[l]; c++) launch_of[j++] = l;
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

/* A device event for record i of k, as launch `launch` of run `run`. */
static bool device_event(fc_profile_rec *r, const fc_cupti_kernel *k, int run, int launch, int flow) {
    fc_profile_event *ev = fc_profile_rec_event(r, FC_TRACK_DEVICE, run, launch, k->start, k->end);
    if (!ev) return false;
    ev->flow = flow;
    snprintf(ev->name, sizeof ev->name, "%s", k->name);
    return true;
}

/* The replays' kernels (o, sorted) as events, one run at a time. */
static fc_status map_replays(fc_profile_rec *r, const fc_cupti_kernel *k, const ord *o, int no, const int *learned,
                             char *why, size_t nwhy) {
    int *launch_of = malloc(sizeof *launch_of * (size_t)(no + 1));
    if (!launch_of) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int a = 0; a < no && !why[0];) {
        int b = a;
        while (b < no && o[b].run == o[a].run) b++;
        if (match_replay(r, k, o + a, b - a, learned, launch_of, why, nwhy))
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

/* A replay (a driver call tagged as one) whose kernels have no record,
 * in a program that has some: why says which. */
static fc_status replays_seen(const fc_profile_rec *r, int learn, const fc_cupti_api *a, int na, const fc_cupti_ext *e,
                              int ne, const ord *o, int no, char *why, size_t nwhy) {
    bool any = false;
    for (int i = 0; i < r->nlaunches && !any; i++) any = in_graph(&r->launches[i]);
    bool *seen = calloc((size_t)r->runs + 1, sizeof *seen);
    if (!seen) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int j = 0; j < no; j++) seen[o[j].run] = true;
    for (int i = 0; i < na && any; i++) {
        int run, launch;
        if (!tagged(r, learn, e, ne, a[i].correlation, &run, &launch) || run >= r->runs ||
            launch != (int)FC_CUPTI_REPLAY || seen[run])
            continue;
        snprintf(why, nwhy, "CUPTI recorded no kernel of the replay of run %d", run);
        break;
    }
    free(seen);
    return FC_OK;
}

/* The driver calls of the measured runs as host events; a call that
 * launched a kernel with a flow (flows, sorted) starts that flow. */
static fc_status host_events(fc_profile_rec *r, int learn, const fc_cupti_api *a, int na, const fc_cupti_ext *e,
                             int ne, const uint32_t *flows, int nflows) {
    for (int i = 0; i < na; i++) {
        int run, launch;
        if (!tagged(r, learn, e, ne, a[i].correlation, &run, &launch) || run >= r->runs) continue;
        const bool replay = launch == (int)FC_CUPTI_REPLAY;
        fc_profile_event *ev = fc_profile_rec_event(r, FC_TRACK_HOST, run, replay ? -1 : launch, a[i].start, a[i].end);
        if (!ev) return FC_ERR_NOMEM;
        if (nflows > 0 && bsearch(&a[i].correlation, flows, (size_t)nflows, sizeof *flows, cmp_u32))
            ev->flow = (int)a[i].correlation;
        snprintf(ev->name, sizeof ev->name, "%.60s (driver call %u)", replay ? "graph replay" : r->launches[launch].name,
                 a[i].cbid);
    }
    return FC_OK;
}

fc_status fc_cupti_map(fc_profile_rec *r, int learn, const fc_cupti_kernel *k, int nk, const fc_cupti_api *a, int na,
                       fc_cupti_ext *e, int ne, char *why, size_t nwhy) {
    why[0] = 0;
    if (ne > 0) qsort(e, (size_t)ne, sizeof *e, cmp_ext);
    const int base = r->nevents;
    ord *o = malloc(sizeof *o * (size_t)(nk + 1));
    int *learned = calloc((size_t)r->nlaunches + 1, sizeof *learned);
    uint32_t *flows = malloc(sizeof *flows * (size_t)(nk + 1));
    fc_status st = o && learned && flows ? FC_OK : fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    int no = 0, nflows = 0;
    bool any_learned = false;
    for (int i = 0; i < nk && st == FC_OK; i++) {
        int run, launch;
        if (!tagged(r, learn, e, ne, k[i].correlation, &run, &launch)) continue;
        if (launch == (int)FC_CUPTI_REPLAY) {
            if (run < r->runs) o[no++] = (ord){run, i, k[i].start, k[i].end};
        } else if (run == learn) {
            learned[launch]++;
            any_learned = true;
        } else if (!device_event(r, &k[i], run, launch, (int)k[i].correlation)) st = FC_ERR_NOMEM;
    }
    if (st == FC_OK && no > 0) {
        qsort(o, (size_t)no, sizeof *o, cmp_ord);
        st = map_replays(r, k, o, no, any_learned ? learned : NULL, why, nwhy);
    }
    if (st == FC_OK && !why[0]) st = replays_seen(r, learn, a, na, e, ne, o, no, why, nwhy);
    if (st == FC_OK && !why[0]) {
        for (int i = base; i < r->nevents; i++)
            if (r->events[i].flow > 0) flows[nflows++] = (uint32_t)r->events[i].flow;
        qsort(flows, (size_t)nflows, sizeof *flows, cmp_u32);
        st = host_events(r, learn, a, na, e, ne, flows, nflows);
    }
    if (st != FC_OK || why[0]) r->nevents = base;
    free(o);
    free(learned);
    free(flows);
    return st;
}
