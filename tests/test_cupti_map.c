/*
 * test_cupti_map.c - CUPTI's records to a profile's launches
 * (fc_cupti_map, runtime/cuda/cupti.h), fed synthetic records: no GPU, no
 * CUPTI. A program like the GPT-2 block's: generated kernels, a view, a
 * load-time kernel (not in the graph), and library calls, two of them one
 * after another (one running two kernels). Replays: every kernel under the
 * graph launch's correlation id, placed by start order and checked by
 * name, the split of consecutive library calls learned from a launch-by-
 * launch run; each way a replay can fail to match (a name, a count, a
 * missing or extra kernel, no learned run, no records at all) drops every
 * event and says why. Launch by launch: each record by its tag, driver
 * calls as host events (more calls than kernels). Then the rows and the
 * summary made from replayed events (fc_profile_make): a library call's
 * kernels summed, the gaps between launches, busy time as the union of
 * overlapping kernels (a programmatic edge), and each launch's own time
 * (what it adds after the kernels before it ended).
 */
#include "check.h"
#include "runtime/cuda/cupti.h"
#include "runtime/profile_impl.h"

#include <stdlib.h>

/* The launches: 0 fc_ln, 1 gemm (1 kernel), 2 fc_split, 3 a view, 4 gemm (2
 * kernels: split-K and its reduction), 5 gemm, 6 a load-time fc_wt, 7 fc_out. */
enum { NL = 8 };
static const struct {
    const char *name;
    fc_launch_kind kind;
    bool loadtime;
} plan[NL] = {{"fc_ln", FC_LAUNCH_KERNEL, false},   {"gemm", FC_LAUNCH_LIBRARY, false},
              {"fc_split", FC_LAUNCH_KERNEL, false}, {"view", FC_LAUNCH_ALIAS, false},
              {"gemm", FC_LAUNCH_LIBRARY, false},    {"gemm", FC_LAUNCH_LIBRARY, false},
              {"fc_wt", FC_LAUNCH_KERNEL, true},     {"fc_out", FC_LAUNCH_KERNEL, false}};
/* Each graph kernel in order: its launch, its name, its device time (us). */
enum { NK = 7 };
static const struct {
    int launch;
    const char *name;
    double us;
} seq[NK] = {{0, "fc_ln", 2},           {1, "sm90_gemm_a", 10},  {2, "fc_split", 3}, {4, "gemm_splitk", 8},
             {4, "splitk_reduce", 1},   {5, "sm90_gemm_b", 6},   {7, "fc_out", 4}};

typedef struct recs {
    fc_cupti_kernel k[256];
    fc_cupti_api a[256];
    fc_cupti_ext e[256];
    int nk, na, ne;
} recs;

static uint64_t tag(int run, unsigned launch) { return ((uint64_t)(run + 1) << FC_CUPTI_RUN_SHIFT) | launch; }

static void kernel(recs *R, uint32_t corr, double start, double end, const char *name) {
    fc_cupti_kernel *k = &R->k[R->nk++];
    k->correlation = corr;
    k->graph = corr >= 900 && corr < 5000 ? 7 : 0; /* a replay's */
    k->start = start;
    k->end = end;
    snprintf(k->name, sizeof k->name, "%s", name);
}

static void call(recs *R, uint32_t corr, double start, double end, unsigned cbid, uint64_t id) {
    R->a[R->na++] = (fc_cupti_api){corr, start, end, cbid, false};
    if (id) R->e[R->ne++] = (fc_cupti_ext){corr, id};
}

/* A replay of run `run` starting at t (ms): one graph launch (correlation
 * corr; tagged with the run, or, run -1, neither tagged nor recorded, as in
 * a capture of kernels alone), its kernels 1 us apart, recorded last first (CUPTI hands records
 * over as buffers fill, not in start order). skip: a kernel (index in seq)
 * left out, -1 none; extra: a name run after the last, NULL none. */
static void replay(recs *R, int run, uint32_t corr, double t, int skip, const char *extra) {
    if (run >= 0) call(R, corr, t, t + 0.004, 311, tag(run, FC_CUPTI_REPLAY));
    double at[NK + 1], now = t + 0.005;
    for (int i = 0; i < NK; i++) {
        at[i] = now;
        now += seq[i].us * 1e-3 + 1e-3;
    }
    if (extra) kernel(R, corr, now, now + 1e-3, extra);
    for (int i = NK - 1; i >= 0; i--)
        if (i != skip) kernel(R, corr, at[i], at[i] + seq[i].us * 1e-3, seq[i].name);
}

/* A run launch by launch: each launch its own driver call(s) and kernels,
 * tagged with the launch; a synchronization after (tagged with the last). */
static void eager(recs *R, int run, uint32_t *corr, double t) {
    for (int i = 0; i < NK; i++) {
        const uint32_t c = (*corr)++;
        call(R, c, t, t + 0.003, 307, tag(run, (unsigned)seq[i].launch));
        kernel(R, c, t + 0.004, t + 0.004 + seq[i].us * 1e-3, seq[i].name);
        t += 0.004 + seq[i].us * 1e-3 + 0.002;
    }
    /* Calls that launch nothing (a context query, the sync): more calls
     * than kernels. */
    for (int j = 0; j < 3; j++) {
        const uint32_t c = (*corr)++;
        call(R, c, t, t + 0.001, 17, tag(run, 7));
        t += 0.002;
    }
}

static void rec_init(fc_profile_rec *r, fc_context *ctx, int runs) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->runs = runs;
    r->warmup = 1;
    CHECK(fc_profile_rec_init(r, NL) == FC_OK);
    for (int i = 0; i < NL; i++) {
        snprintf(r->launches[i].name, sizeof r->launches[i].name, "%s", plan[i].name);
        r->launches[i].kind = plan[i].kind;
        r->launches[i].loadtime = plan[i].loadtime;
        r->launches[i].bytes = -1;
        r->launches[i].flops = -1;
    }
    for (int k = 0; k < runs; k++) {
        r->run_start[k] = k;
        r->run_end[k] = k + 0.06;
    }
}

/* fc_cupti_map over R's records. */
static fc_status map(fc_profile_rec *r, int learn, bool replays, recs *R, char *why, size_t nwhy) {
    fc_cupti_records rec = {R->k, R->a, R->e, R->nk, R->na, R->ne};
    return fc_cupti_map(r, learn, replays, &rec, why, nwhy);
}

static int events_of(const fc_profile_rec *r, fc_profile_track track, int run, int launch) {
    int n = 0;
    for (int i = 0; i < r->nevents; i++)
        n += r->events[i].track == track && r->events[i].run == run && r->events[i].launch == launch;
    return n;
}

/* Replays of 3 runs (indices 0 to 2), learned from a run launch by launch
 * (index 3); the warm-up replay (index 4) and a kernel of no graph and no
 * tag dropped.
 * calls: the replays' graph launches recorded and tagged; else a capture
 * of kernels alone (each run by its span; no host events, no flows). */
static void test_replay(fc_context *ctx, bool calls) {
    static recs R;
    memset(&R, 0, sizeof R);
    uint32_t corr = 1;
    eager(&R, 3, &corr, -1.0);
    replay(&R, calls ? 4 : -1, 900, -0.5, -1, NULL);
    for (int k = 0; k < 3; k++) replay(&R, calls ? k : -1, 1000 + (uint32_t)k, k, -1, NULL);
    kernel(&R, 5000, 0.01, 0.02, "untagged");
    fc_profile_rec r;
    rec_init(&r, ctx, 3);
    char why[200] = "x";
    CHECK(map(&r, 3, true, &R, why, sizeof why) == FC_OK);
    CHECK_STR(why, "");
    int device = 0, host = 0;
    for (int i = 0; i < r.nevents; i++) {
        const fc_profile_event *e = &r.events[i];
        CHECK(e->run >= 0 && e->run < 3);
        if (e->track == FC_TRACK_HOST) {
            host++;
            CHECK_EQ_INT(e->launch, -1);
            CHECK_EQ_INT(e->flow, 1000 + e->run);
            CHECK_STR(e->name, "graph replay (driver call 311)");
            continue;
        }
        device++;
        /* Its launch is the one whose kernel it is by name. */
        int s = -1;
        for (int j = 0; j < NK; j++)
            if (!strcmp(seq[j].name, e->name)) s = j;
        CHECK(s >= 0);
        if (s < 0) continue;
        CHECK_EQ_INT(e->launch, seq[s].launch);
        if (s == 0) CHECK_NEAR(e->start, e->run + 0.005, 1e-12);
        /* One flow per replay: its call to its first kernel. */
        CHECK_EQ_INT(e->flow, s == 0 && calls ? 1000 + e->run : 0);
    }
    CHECK_EQ_INT(device, 3 * NK);
    CHECK_EQ_INT(host, calls ? 3 : 0);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(events_of(&r, FC_TRACK_DEVICE, k, 4), 2);
        CHECK_EQ_INT(events_of(&r, FC_TRACK_DEVICE, k, 5), 1);
        CHECK_EQ_INT(events_of(&r, FC_TRACK_DEVICE, k, 6), 0);
        CHECK_EQ_INT(events_of(&r, FC_TRACK_DEVICE, k, 3), 0);
    }

    /* The rows and the summary from the replays. */
    r.replayed = true;
    snprintf(r.mode, sizeof r.mode, "replays");
    r.plain_wall_ms = 0.06;
    fc_profile *pf = NULL;
    CHECK(fc_profile_make(&r, "block", &pf) == FC_OK);
    CHECK(r.events == NULL); /* moved into the profile */
    if (!pf) return;
    fc_profile_summary s;
    fc_profile_get_summary(pf, &s);
    CHECK(s.replayed);
    CHECK_STR(s.mode, "replays");
    CHECK_EQ_INT(s.launches, 7); /* the view is left out; the load-time kernel is a row of no time */
    const fc_profile_launch *top = fc_profile_at(pf, 0);
    CHECK(top && top->launch == 1); /* 10 us */
    const fc_profile_launch *second = fc_profile_at(pf, 1);
    /* The split-K gemm: its two kernels, 8 + 1 us. */
    CHECK(second && second->launch == 4);
    if (second) CHECK_NEAR(second->median_ms, 0.009, 1e-9);
    CHECK_NEAR(s.device_ms, 0.034, 1e-9);
    /* Gaps of 1 us after every launch but the split-K's own two kernels. */
    CHECK_EQ_INT(s.ngaps, 3);
    CHECK_NEAR(s.gap_ms[0], 0.001, 1e-9);
    CHECK(!s.host_bound); /* 34 us busy in 60 */
    int l = -1;
    double a = 0, b = 0;
    CHECK(fc_profile_timeline(pf, 0, &l, &a, &b));
    CHECK_EQ_INT(l, 0);
    CHECK_NEAR(a, 0.005, 1e-9);
    char *text = fc_profile_text(pf, FC_PROFILE_TABLE);
    CHECK(text && strstr(text, "profiled runs: replays\n"));
    CHECK(text && strstr(text, "(a profiled run: +0.0%)"));
    free(text);
    fc_profile_free(pf);
}

/* A kernel after a programmatic edge starts before the one before it
 * ends: busy time counts the overlap once, and no gap is negative. */
static void test_overlap(fc_context *ctx) {
    static recs R;
    memset(&R, 0, sizeof R);
    uint32_t corr = 1;
    eager(&R, 1, &corr, -1.0);
    /* fc_ln [0, 0.030), sm90_gemm_a from 0.010 on, the rest after it. */
    call(&R, 2000, 0, 0.001, 311, tag(0, FC_CUPTI_REPLAY));
    double t = 0.010;
    kernel(&R, 2000, 0.000, 0.030, "fc_ln");
    for (int i = 1; i < NK; i++) {
        kernel(&R, 2000, t, t + 0.030, seq[i].name);
        t += 0.030;
    }
    /* Busy: the union [0, 0.190) of 0.21 ms of kernels. Against a wall of
     * 0.36 (half: 0.18) the union is more than half; against 0.40 (half:
     * 0.20) less, where the sum would not be. */
    const double walls[] = {0.36, 0.40};
    for (int w = 0; w < 2; w++) {
        fc_profile_rec r;
        rec_init(&r, ctx, 1);
        r.run_end[0] = walls[w];
        char why[200];
        CHECK(map(&r, 1, true, &R, why, sizeof why) == FC_OK);
        CHECK_STR(why, "");
        fc_profile *pf = NULL;
        CHECK(fc_profile_make(&r, "overlap", &pf) == FC_OK);
        if (!pf) return;
        fc_profile_summary s;
        fc_profile_get_summary(pf, &s);
        CHECK_EQ_INT(s.host_bound, w == 1);
        CHECK_EQ_INT(s.ngaps, 0); /* overlaps and back-to-back kernels: no gap */
        /* Each launch's own time: sm90_gemm_a's 0.030 less the 0.020 it
         * overlapped fc_ln, the others whole (the load-time fc_wt none);
         * they add up to the union. */
        CHECK_NEAR(s.device_ms, 0.19, 1e-9);
        for (int i = 0; i < fc_profile_count(pf); i++) {
            const fc_profile_launch *row = fc_profile_at(pf, i);
            CHECK_NEAR(row->median_ms, row->launch == 1 ? 0.010 : row->launch == 4 ? 0.060 : row->launch == 6 ? 0 : 0.030, 1e-9);
        }
        fc_profile_free(pf);
    }
}

/* A replay that does not match: why names it, and nothing is kept. */
static void expect_mismatch(fc_context *ctx, recs *R, int learn, const char *want) {
    fc_profile_rec r;
    rec_init(&r, ctx, 2);
    char why[200] = "";
    CHECK(map(&r, learn, true, R, why, sizeof why) == FC_OK);
    if (!strstr(why, want)) {
        check_failed++;
        fprintf(stderr, "mismatch: why is \"%s\", expected it to say \"%s\"\n", why, want);
    } else check_passed++;
    CHECK_EQ_INT(r.nevents, 0);
    fc_profile_rec_release(&r);
}

static void test_mismatch(fc_context *ctx) {
    static recs R;
    /* The second replay after a good first one (the launch-by-launch run,
     * index 2, first): a kernel (index in seq) left out, or one more at the end. */
    const struct {
        int skip;
        const char *extra, *want;
    } cases[] = {
        /* A generated kernel missing: the gemm before it takes the rest. */
        {2, NULL, "the replay of run 1 ran 6 kernels and none of launch 2 (fc_split)"},
        {6, NULL, "none of launch 7 (fc_out)"},
        /* One of the split-K pair missing: the learned count differs. */
        {4, NULL, "launches 4 to 5 (library calls) ran 2 kernels in the replay of run 1, not the 3"},
        {3, NULL, "launches 4 to 5 (library calls) ran 2 kernels in the replay of run 1, not the 3"},
        {5, NULL, "launches 4 to 5 (library calls) ran 2 kernels in the replay of run 1, not the 3"},
        {1, NULL, "launch 1 (gemm) ran no kernel in the replay of run 1"},
        {-1, "memset32", "ran 1 kernels after its last launch's (memset32 first)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memset(&R, 0, sizeof R);
        uint32_t corr = 1;
        eager(&R, 2, &corr, -1.0);
        replay(&R, 0, 1000, 0, -1, NULL);
        replay(&R, 1, 1001, 1, cases[c].skip, cases[c].extra);
        expect_mismatch(ctx, &R, 2, cases[c].want);
    }
    /* No run launch by launch: the consecutive library calls cannot be split. */
    memset(&R, 0, sizeof R);
    replay(&R, 0, 1000, 0, -1, NULL);
    expect_mismatch(ctx, &R, -1, "launches 4 to 5 are library calls one after another");
    /* A replay CUPTI recorded no kernel of (its call only). */
    memset(&R, 0, sizeof R);
    uint32_t corr = 1;
    eager(&R, 2, &corr, -1.0);
    replay(&R, 0, 1000, 0, -1, NULL);
    call(&R, 1001, 1, 1.001, 311, tag(1, FC_CUPTI_REPLAY));
    expect_mismatch(ctx, &R, 2, "CUPTI recorded no kernel of the replay of run 1");
    /* Replays recorded without calls: the same, found by the runs' spans. */
    memset(&R, 0, sizeof R);
    corr = 1;
    eager(&R, 2, &corr, -1.0);
    replay(&R, -1, 1000, 0, -1, NULL);
    expect_mismatch(ctx, &R, 2, "CUPTI recorded no kernel of the replay of run 1");
    memset(&R, 0, sizeof R);
    corr = 1;
    eager(&R, 2, &corr, -1.0);
    replay(&R, -1, 1000, 0, -1, NULL);
    replay(&R, -1, 1001, 1, 3, NULL);
    expect_mismatch(ctx, &R, 2, "launches 4 to 5 (library calls) ran 2 kernels in the replay of run 1, not the 3");
}

/* Library calls one after another, split by the names the run launch by
 * launch gave: a kernel the replay runs and that run did not (a memset
 * node reported as a kernel) goes with the call it follows; the two calls
 * may run kernels of one name. */
static void test_split(fc_context *ctx) {
    static recs R;
    memset(&R, 0, sizeof R);
    uint32_t corr = 1;
    eager(&R, 1, &corr, -1.0);
    const char *names[] = {"fc_ln", "sm90_gemm_a", "fc_split", "gemm_splitk", "memset32", "splitk_reduce", "sm90_gemm_b", "fc_out"};
    const int want[] = {0, 1, 2, 4, 4, 4, 5, 7};
    for (int i = 0; i < 8; i++) kernel(&R, 1000, 0.01 * i, 0.01 * i + 0.005, names[i]);
    fc_profile_rec r;
    rec_init(&r, ctx, 1);
    r.run_end[0] = 1; /* the span holds all eight */
    char why[200];
    CHECK(map(&r, 1, true, &R, why, sizeof why) == FC_OK);
    CHECK_STR(why, "");
    CHECK_EQ_INT(r.nevents, 8);
    for (int i = 0; i < r.nevents; i++) CHECK_EQ_INT(r.events[i].launch, want[(int)(r.events[i].start / 0.01 + 0.5)]);
    fc_profile_rec_release(&r);
    /* Both calls of one kernel name (the learned run's too). */
    memset(&R, 0, sizeof R);
    corr = 1;
    for (int i = 0; i < 8; i++) {
        if (i == 4) continue;
        const int l = want[i];
        const char *n = l == 5 ? "gemm_splitk" : names[i];
        call(&R, corr, -1 + 0.01 * i, -1 + 0.01 * i + 0.001, 307, tag(1, (unsigned)l));
        kernel(&R, corr++, -1 + 0.01 * i, -1 + 0.01 * i + 0.005, n);
    }
    for (int i = 0; i < 8; i++)
        if (i != 4) kernel(&R, 1000, 0.01 * i, 0.01 * i + 0.005, want[i] == 5 ? "gemm_splitk" : names[i]);
    rec_init(&r, ctx, 1);
    r.run_end[0] = 1; /* the span holds all eight */
    CHECK(map(&r, 1, true, &R, why, sizeof why) == FC_OK);
    CHECK_STR(why, "");
    CHECK_EQ_INT(r.nevents, 7);
    for (int i = 0; i < r.nevents; i++) CHECK_EQ_INT(r.events[i].launch, want[(int)(r.events[i].start / 0.01 + 0.5)]);
    fc_profile_rec_release(&r);
}

/* A program whose library calls never follow one another needs no
 * launch-by-launch run: one gemm between generated kernels. */
static void test_no_learn(fc_context *ctx) {
    static recs R;
    memset(&R, 0, sizeof R);
    fc_profile_rec r;
    rec_init(&r, ctx, 1);
    r.launches[5].kind = FC_LAUNCH_ALIAS; /* launches 4 and 5 are one gemm now */
    call(&R, 7, 0, 0.001, 311, tag(0, FC_CUPTI_REPLAY));
    const char *names[] = {"fc_ln", "a", "fc_split", "b", "c", "d", "fc_out"};
    const int want[] = {0, 1, 2, 4, 4, 4, 7};
    for (int i = 0; i < 7; i++) kernel(&R, 7, 0.01 * i, 0.01 * i + 0.005, names[i]);
    char why[200];
    CHECK(map(&r, -1, true, &R, why, sizeof why) == FC_OK);
    CHECK_STR(why, "");
    CHECK_EQ_INT(r.nevents, 8);
    for (int i = 0; i < r.nevents; i++)
        if (r.events[i].track == FC_TRACK_DEVICE) CHECK_EQ_INT(r.events[i].launch, want[(int)(r.events[i].start / 0.01 + 0.5)]);
    fc_profile_rec_release(&r);
}

/* Launch by launch: each kernel by its own tag, each driver call a host
 * event of its launch (more calls than kernels: the calls' own
 * correlation ids name them), a flow only from a call that launched. */
static void test_eager(fc_context *ctx) {
    static recs R;
    memset(&R, 0, sizeof R);
    uint32_t corr = 1;
    eager(&R, 2, &corr, -1.0); /* the learned run: no events */
    eager(&R, 0, &corr, 0);
    eager(&R, 1, &corr, 1);
    fc_profile_rec r;
    rec_init(&r, ctx, 2);
    char why[200];
    CHECK(map(&r, 2, false, &R, why, sizeof why) == FC_OK);
    CHECK_STR(why, "");
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(events_of(&r, FC_TRACK_DEVICE, k, 4), 2);
        CHECK_EQ_INT(events_of(&r, FC_TRACK_HOST, k, 4), 2);
        CHECK_EQ_INT(events_of(&r, FC_TRACK_HOST, k, 7), 1 + 3);
        CHECK_EQ_INT(events_of(&r, FC_TRACK_DEVICE, k, 7), 1);
    }
    int flows = 0;
    for (int i = 0; i < r.nevents; i++) {
        const fc_profile_event *e = &r.events[i];
        if (e->track == FC_TRACK_HOST && e->flow) {
            flows++;
            CHECK(strstr(e->name, "(driver call 307)") != NULL);
        }
        if (e->track == FC_TRACK_HOST && !e->flow) CHECK_STR(e->name, "fc_out (driver call 17)");
    }
    CHECK_EQ_INT(flows, 2 * NK);
    CHECK_EQ_INT(r.nevents, 2 * (NK + NK + 3));
    fc_profile_rec_release(&r);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_replay(ctx, true);
    test_replay(ctx, false);
    test_overlap(ctx);
    test_mismatch(ctx);
    test_split(ctx);
    test_no_learn(ctx);
    test_eager(ctx);
    fc_context_free(ctx);
    return check_report("test_cupti_map");
}
