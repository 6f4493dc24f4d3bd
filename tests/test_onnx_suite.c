/* test_onnx_suite.c - the ONNX backend test suite (Debian's libonnx-testdata)
 * through the importer and the reference interpreter.
 *
 * Each test directory holds model.onnx and test_data_set_N with input_N.pb
 * and output_N.pb TensorProtos. A test passes when every output matches
 * within the suite's own tolerance (rtol 1e-3, atol 1e-7, as onnx.backend's
 * runner). tests/onnx/expected_failures.txt lists the tests that do not
 * pass, each with its reason; a test that fails and is not listed, or is
 * listed and passes, fails this test, so the list stays exact.
 *
 * With --device=cpu or --device=cuda the models are compiled and run there
 * instead (fc_compile, fc_program_run_host), with the same tolerance. A
 * test listed for the reference interpreter is not run then; the tests that
 * pass on the reference but not on the device are listed, with the reason,
 * in tests/onnx/expected_failures_DEVICE.txt.
 *
 *   test_onnx_suite [--device=ref|cpu|cuda] [--data DIR] [--write-expected FILE] [--only NAME] [--verbose]
 *
 * --write-expected writes the failures of this run as a list (and still
 * names the ones the current lists do not expect), exiting 0.
 */
#include "fusec.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#pragma GCC diagnostic ignored "-Wformat-truncation"

/* Debian's copy; --data DIR names another (a machine without the package). */
static const char *data_dir = "/usr/share/libonnx-testdata/data";
static const char *sets[] = {"node", "simple", "pytorch-converted", "pytorch-operator"};

typedef struct { char name[160]; char reason[200]; } entry;

static double elem(const fc_tensor *t, int64_t i) {
    switch (t->dtype) {
    case FC_F64: return ((double *)t->data)[i];
    case FC_F32: return ((float *)t->data)[i];
    case FC_F16: return fc_f16_to_f32(((uint16_t *)t->data)[i]);
    case FC_BF16: return fc_bf16_to_f32(((uint16_t *)t->data)[i]);
    case FC_I64: return (double)((int64_t *)t->data)[i];
    case FC_I32: return ((int32_t *)t->data)[i];
    case FC_I8: return ((int8_t *)t->data)[i];
    default: return ((uint8_t *)t->data)[i];
    }
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void one_line(char *dst, size_t cap, const char *src) {
    size_t j = 0;
    for (; *src && j + 1 < cap; src++) {
        if (*src == '\n') break;
        dst[j++] = *src;
    }
    dst[j] = 0;
}

/* Run one test: true when it passes, else the reason. Inputs that the
 * importer needs as known data (a Reshape's shape given as a graph input)
 * are frozen on a second try: only integer inputs (shapes and axes),
 * scalars (a OneHot's depth) and float vectors of at most one entry per
 * dim (a Resize's scales); *frozen says it was needed. */
static fc_device run_device = FC_DEVICE_REF;

/* g on run_device: the reference interpreter, or a compiled program. */
static fc_status run_on_device(fc_context *ctx, fc_graph *g, const fc_tensor *in, int np, fc_tensor *out, int nout) {
    if (run_device == FC_DEVICE_REF) return fc_run_reference(g, in, np, out, nout);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = run_device;
    fc_program *p = NULL;
    fc_status st = fc_compile(g, &o, &p);
    if (st == FC_OK) st = fc_program_run_host(p, in, np, out, nout, NULL, 0);
    fc_program_free(p);
    return st;
}

static bool run_test(const char *dir, char *reason, size_t cap, bool *frozen_used) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    fc_weights *w = NULL, *frozen = NULL;
    fc_tensor files[64], *in = NULL, *out = NULL, *want = NULL;
    char *fname[64];
    bool used[64] = {0};
    int nfiles = 0, np = 0, nout = 0;
    bool ok = false, *bound = NULL;
    *frozen_used = false;
    for (; nfiles < 64; nfiles++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%d.pb", dir, nfiles);
        if (!is_file(path)) break;
        if (fc_tensor_from_onnx_file(ctx, path, &files[nfiles], &fname[nfiles]) != FC_OK) {
            one_line(reason, cap, fc_last_error(ctx));
            goto done;
        }
    }
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    fc_status st = fc_graph_from_onnx(ctx, path, NULL, 0, NULL, &g, &w);
    if (st != FC_OK && strstr(fc_last_error(ctx), "must be known")) {
        frozen = fc_weights_new();
        for (int i = 0; i < nfiles; i++)
            if (fname[i] && (files[i].dtype == FC_I64 || files[i].dtype == FC_I32 || fc_tensor_numel(&files[i]) <= 1 ||
                             (files[i].rank == 1 && files[i].dtype == FC_F32 && files[i].shape[0] <= FC_MAX_RANK)))
                fc_weights_add(frozen, fname[i], &files[i]);
        *frozen_used = true;
        st = fc_graph_from_onnx(ctx, path, NULL, 0, frozen, &g, &w);
    }
    if (st != FC_OK) {
        const char *m = fc_last_error(ctx);
        const char *e = strstr(m, "error: ");
        one_line(reason, cap, e ? e + 7 : m);
        goto done;
    }
    np = fc_graph_num_params(g);
    nout = fc_graph_num_outputs(g);
    in = calloc((size_t)np + 1, sizeof *in);
    out = calloc((size_t)nout + 1, sizeof *out);
    want = calloc((size_t)nout + 1, sizeof *want);
    bound = calloc((size_t)np + 1, sizeof *bound);
    if (!in || !out || !want || !bound) { snprintf(reason, cap, "out of memory"); goto done; }
    if (fc_weights_bind(w, g, in, np, bound, false, 0) != FC_OK) {
        one_line(reason, cap, fc_last_error(ctx));
        goto done;
    }
    for (int i = 0; i < np; i++) {
        if (bound[i]) continue;
        /* By name, else the next file not frozen or used. */
        const fc_tensor *t = NULL;
        for (int f = 0; f < nfiles && !t; f++)
            if (!used[f] && (!fname[f] || !frozen || fc_weights_find(frozen, fname[f]) == NULL)) {
                used[f] = true;
                t = &files[f];
            }
        if (!t) { snprintf(reason, cap, "no input file for parameter %d", i); goto done; }
        in[i] = *t;
        /* The suite stores bfloat16 data as UINT16 bit patterns (numpy has no
         * bfloat16): read them as the bf16 parameter's bits. */
        fc_value *p = fc_graph_param(g, i);
        if (fc_value_dtype(p) == FC_BF16 && t->dtype == FC_I32) {
            int64_t cnt = fc_tensor_numel(t);
            for (int64_t j = 0; j < cnt; j++) ((uint16_t *)t->data)[j] = (uint16_t)((int32_t *)t->data)[j];
            in[i].dtype = FC_BF16;
        }
    }
    for (int i = 0; i < nout; i++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/output_%d.pb", dir, i);
        if (fc_tensor_from_onnx_file(ctx, path, &want[i], NULL) != FC_OK) {
            snprintf(reason, cap, "cannot read expected output %d", i);
            goto done;
        }
    }
    st = run_on_device(ctx, g, in, np, out, nout);
    if (st != FC_OK) {
        one_line(reason, cap, fc_last_error(ctx));
        goto done;
    }
    ok = true;
    for (int i = 0; i < nout && ok; i++) {
        int64_t n = fc_tensor_numel(&out[i]);
        bool same = out[i].rank == want[i].rank && n == fc_tensor_numel(&want[i]);
        for (int d = 0; same && d < out[i].rank; d++) same = out[i].shape[d] == want[i].shape[d];
        if (!same) {
            snprintf(reason, cap, "output %d has the wrong shape", i);
            ok = false;
            break;
        }
        if (out[i].dtype == FC_STRING || want[i].dtype == FC_STRING) { /* strings: exactly */
            if (out[i].dtype != want[i].dtype) {
                snprintf(reason, cap, "output %d is %s, expected %s", i, fc_dtype_name(out[i].dtype),
                         fc_dtype_name(want[i].dtype));
                ok = false;
                break;
            }
            const char *const *a = out[i].data, *const *b = want[i].data;
            for (int64_t j = 0; j < n && ok; j++)
                if (strcmp(a[j], b[j])) {
                    snprintf(reason, cap, "output %d differs at element %lld: \"%.40s\", expected \"%.40s\"", i,
                             (long long)j, a[j], b[j]);
                    ok = false;
                }
            continue;
        }
        bool bf16_bits = out[i].dtype == FC_BF16 && want[i].dtype == FC_I32;
        for (int64_t j = 0; j < n; j++) {
            double a = bf16_bits ? ((uint16_t *)out[i].data)[j] : elem(&out[i], j), b = elem(&want[i], j);
            if (isnan(a) && isnan(b)) continue;
            if (a == b) continue;
            if (!(fabs(a - b) <= 1e-7 + 1e-3 * fabs(b))) {
                snprintf(reason, cap, "output %d differs at element %lld: %g, expected %g", i, (long long)j, a, b);
                ok = false;
                break;
            }
        }
    }
done:
    for (int i = 0; i < nfiles; i++) {
        fc_tensor_release(&files[i]);
        fc_free(fname[i]);
    }
    for (int i = 0; out && i < nout; i++) fc_tensor_release(&out[i]);
    for (int i = 0; want && i < nout; i++) fc_tensor_release(&want[i]);
    free(bound);
    free(in);
    free(out);
    free(want);
    fc_weights_free(w);
    fc_weights_free(frozen);
    fc_graph_free(g);
    fc_context_free(ctx);
    return ok;
}

/* Read a list of expected failures (the first word of each line that is
 * not a comment); false when the file cannot be opened. */
static bool read_list(const char *path, entry **list, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    int cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            entry *grown = realloc(*list, sizeof **list * (size_t)cap);
            if (!grown) break;
            *list = grown;
        }
        char *sp = strpbrk(line, " \n");
        if (sp) *sp = 0;
        snprintf((*list)[*n].name, sizeof (*list)[*n].name, "%s", line);
        (*list)[*n].reason[0] = 0;
        (*n)++;
    }
    fclose(f);
    return true;
}

static bool listed_in(const entry *list, int n, const char *key) {
    for (int j = 0; j < n; j++)
        if (!strcmp(list[j].name, key)) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    const char *write = NULL, *only = NULL;
    bool verbose = false;
    /* --shard I/N: only the tests whose place in the run (over every set,
     * in sorted order) is I modulo N, so that N processes share a machine's
     * cores (NVRTC compiles each test's kernels: the suite on CUDA). */
    int shard = 0, nshards = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--write-expected") && i + 1 < argc) write = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--verbose")) verbose = true;
        else if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d/%d", &shard, &nshards) != 2 || nshards < 1 || shard < 0 || shard >= nshards) {
                fprintf(stderr, "test_onnx_suite: --shard takes I/N with 0 <= I < N\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data_dir = argv[++i];
        else if (!strncmp(argv[i], "--device", 8)) {
            const char *name = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : "";
            if (!fc_device_from_name(name, &run_device)) {
                fprintf(stderr, "test_onnx_suite: unknown device '%s' (ref, cpu or cuda)\n", name);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: test_onnx_suite [--device=ref|cpu|cuda] [--data DIR] [--write-expected FILE] [--only NAME] [--shard I/N] [--verbose]\n");
            return 2;
        }
    }
    if (!fc_device_available(run_device)) {
        printf("SKIP: device %s is not usable here (fusec --devices)\n", fc_device_name(run_device));
        return 0;
    }
    fc_context *probe = fc_context_new();
    fc_graph *pg = NULL;
    if (fc_graph_from_onnx_data(probe, "probe", "", 0, NULL, NULL, 0, NULL, &pg, NULL) == FC_ERR_UNSUPPORTED) {
        printf("SKIP: %s\n", fc_last_error(probe));
        fc_context_free(probe);
        return 0;
    }
    fc_graph_free(pg);
    fc_context_free(probe);
    char node_dir[1024];
    snprintf(node_dir, sizeof node_dir, "%s/node", data_dir);
    DIR *probe_dir = opendir(node_dir);
    if (!probe_dir) {
        printf("SKIP: %s is missing (install libonnx-testdata: scripts/setup.sh)\n", node_dir);
        return 0;
    }
    closedir(probe_dir);

    /* The expected failures: the reference interpreter's, and on a device
     * the ones of that device beside them. */
    const char *src = getenv("FUSEC_SRC");
    char lpath[1024], dpath[1024];
    snprintf(lpath, sizeof lpath, "%s/tests/onnx/expected_failures.txt", src ? src : ".");
    snprintf(dpath, sizeof dpath, "%s/tests/onnx/expected_failures_%s.txt", src ? src : ".", fc_device_name(run_device));
    entry *exp = NULL, *dexp = NULL;
    int nexp = 0, ndexp = 0;
    bool on_device = run_device != FC_DEVICE_REF;
    if (!read_list(lpath, &exp, &nexp) && !(write && !on_device)) printf("note: %s not found; every failure is unexpected\n", lpath);
    if (on_device && !read_list(dpath, &dexp, &ndexp))
        printf("note: %s not found; every failure on %s is unexpected\n", dpath, fc_device_name(run_device));

    FILE *wf = write ? fopen(write, "w") : NULL;
    if (wf && !on_device)
        fprintf(wf, "# ONNX backend tests (libonnx-testdata) that do not pass on the reference interpreter, with\n"
                    "# the reason. tests/test_onnx_suite.c fails when a test not listed fails or a listed one\n"
                    "# passes. Regenerate: build/tests/test_onnx_suite --write-expected tests/onnx/expected_failures.txt\n");
    else if (wf)
        fprintf(wf, "# ONNX backend tests (libonnx-testdata) that pass on the reference interpreter but not on %s,\n"
                    "# with the reason (the ones listed in expected_failures.txt are not run there). Regenerate:\n"
                    "# build/tests/test_onnx_suite --device=%s --write-expected tests/onnx/expected_failures_%s.txt\n",
                fc_device_name(run_device), fc_device_name(run_device), fc_device_name(run_device));
    int passed = 0, failed = 0, skipped = 0, unexpected = 0, newly = 0, nfrozen = 0, not_run = 0;
    int set_pass[4] = {0}, set_tot[4] = {0}, place = 0;
    for (int s = 0; s < 4; s++) {
        char sdir[512];
        snprintf(sdir, sizeof sdir, "%s/%s", data_dir, sets[s]);
        DIR *d = opendir(sdir);
        if (!d) continue;
        char **names = NULL;
        int nn = 0, cap = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            if (nn == cap) { cap = cap ? cap * 2 : 256; names = realloc(names, sizeof *names * (size_t)cap); }
            names[nn++] = strdup(e->d_name);
        }
        closedir(d);
        if (nn) qsort(names, (size_t)nn, sizeof *names, cmp_str);
        for (int i = 0; i < nn; i++) {
            char tdir[1024], key[200], mp[1100];
            snprintf(tdir, sizeof tdir, "%s/%s", sdir, names[i]);
            snprintf(key, sizeof key, "%s/%s", sets[s], names[i]);
            snprintf(mp, sizeof mp, "%s/model.onnx", tdir);
            if (only && strcmp(only, names[i]) && strcmp(only, key)) { free(names[i]); continue; }
            if (place++ % nshards != shard) { free(names[i]); continue; }
            if (!is_file(mp)) { skipped++; free(names[i]); continue; }
            char reason[200] = "";
            bool fz = false;
            bool listed = listed_in(exp, nexp, key);
            if (on_device && listed) {
                /* fails on the reference already: its reason is there */
                not_run++;
                free(names[i]);
                continue;
            }
            if (on_device) listed = listed_in(dexp, ndexp, key);
            bool ok = run_test(tdir, reason, sizeof reason, &fz);
            if (ok && fz) nfrozen++;
            set_tot[s]++;
            if (ok) { passed++; set_pass[s]++; }
            else failed++;
            if (wf && !ok) fprintf(wf, "%s %s\n", key, reason);
            if (ok && listed) { newly++; printf("NEWLY PASSING (remove it from the list): %s\n", key); }
            if (!ok && !listed) { unexpected++; printf("UNEXPECTED FAILURE: %s: %s\n", key, reason); }
            if (verbose || only) printf("%s %s %s\n", ok ? "PASS" : "FAIL", key, reason);
            free(names[i]);
        }
        free(names);
    }
    if (wf) fclose(wf);
    for (int s = 0; s < 4; s++) printf("%s: %d of %d passed\n", sets[s], set_pass[s], set_tot[s]);
    if (on_device) printf("on %s (%d listed for the reference interpreter not run)\n", fc_device_name(run_device), not_run);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    printf("(%d of the passed with their integer, scalar and scale inputs frozen: shapes, axes, sizes or scales given as graph inputs)\n", nfrozen);
    free(exp);
    free(dexp);
    if (write || only) return 0;
    if (unexpected || newly) {
        printf("FAIL: %d unexpected failures, %d newly passing tests (tests/onnx/expected_failures.txt)\n", unexpected,
               newly);
        printf("(lists: %s%s%s)\n", lpath, on_device ? " and " : "", on_device ? dpath : "");
        return 1;
    }
    return 0;
}
