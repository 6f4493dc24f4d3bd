/* test_onnx_fuzz.c - the ONNX importer and the safetensors reader on bad
 * bytes, deterministically (seeded): every truncation of small models of the
 * conformance suite, random byte mutations of them, and of a safetensors
 * file; also the error messages for the reasons a file is refused. Each
 * call must return (no crash, no leak under ASan) and a failure must carry a
 * message. tests/fuzz/ holds the libFuzzer harnesses of the same calls. */
#include "fusec.h"
#include "splitmix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

static void import_bytes(const uint8_t *d, size_t n) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    fc_weights *w = NULL;
    fc_status st = fc_graph_from_onnx_data(ctx, "m.onnx", d, n, NULL, NULL, 0, NULL, &g, &w);
    if (st == FC_OK) {
        char *t = fc_print(g);
        CHECK(t != NULL, "print of an imported graph failed: %s", fc_last_error(ctx));
        fc_free(t);
    } else {
        CHECK(fc_last_error(ctx)[0] != 0, "a failure without a message");
        CHECK(g == NULL && w == NULL, "a failure left outputs");
    }
    fc_weights_free(w);
    fc_graph_free(g);
    fc_context_free(ctx);
}

static void load_st(const uint8_t *d, size_t n, const char *want) {
    fc_context *ctx = fc_context_new();
    fc_weights *w = NULL;
    fc_status st = fc_weights_load_safetensors_data(ctx, "w.safetensors", d, n, &w);
    if (want) CHECK(st != FC_OK && strstr(fc_last_error(ctx), want), "want '%s', got '%s'", want, fc_last_error(ctx));
    if (st == FC_OK)
        for (int i = 0; i < fc_weights_count(w); i++) {
            const fc_tensor *t = fc_weights_tensor(w, i);
            size_t b = (size_t)fc_tensor_numel(t) * fc_dtype_size(t->dtype);
            volatile uint8_t s = 0;
            for (size_t j = 0; j < b; j++) s ^= ((const uint8_t *)t->data)[j];
        }
    else CHECK(fc_last_error(ctx)[0] != 0, "a failure without a message");
    fc_weights_free(w);
    fc_context_free(ctx);
}

static uint8_t *read_file(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)l + 1);
    if (b && fread(b, 1, (size_t)l, f) != (size_t)l) { free(b); b = NULL; }
    fclose(f);
    *n = (size_t)l;
    return b;
}

/* A safetensors file: header JSON and data. */
static size_t make_st(uint8_t *buf, const char *json, size_t data_len) {
    size_t h = strlen(json);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, json, h);
    memset(buf + 8 + h, 0x3f, data_len);
    return 8 + h + data_len;
}

int main(void) {
    fc_context *probe = fc_context_new();
    fc_graph *pg = NULL;
    if (fc_graph_from_onnx_data(probe, "p", "", 0, NULL, NULL, 0, NULL, &pg, NULL) == FC_ERR_UNSUPPORTED) {
        printf("SKIP: no ONNX importer\n");
        fc_context_free(probe);
        return 0;
    }
    fc_context_free(probe);

    static const char *models[] = {"node/test_add", "node/test_gemm_all_attributes", "node/test_reshape_extended_dims",
                                   "node/test_slice", "node/test_layer_normalization_2d_axis0",
                                   "node/test_softmax_axis_1", "node/test_gather_0", "node/test_constant",
                                   "simple/test_expand_shape_model1", "pytorch-operator/test_operator_view"};
    uint64_t rng = 26;
    int nmodels = 0;
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        char p[512];
        snprintf(p, sizeof p, "/usr/share/libonnx-testdata/data/%s/model.onnx", models[m]);
        size_t n;
        uint8_t *b = read_file(p, &n);
        if (!b) continue;
        nmodels++;
        for (size_t cut = 0; cut < n; cut += n > 400 ? n / 200 : 1) import_bytes(b, cut);
        uint8_t *mut = malloc(n);
        for (int it = 0; it < 300; it++) {
            memcpy(mut, b, n);
            int k = 1 + (int)(splitmix64(&rng) % 8);
            for (int j = 0; j < k; j++) mut[splitmix64(&rng) % n] = (uint8_t)splitmix64(&rng);
            import_bytes(mut, n);
        }
        free(mut);
        free(b);
    }
    printf("fuzzed %d models\n", nmodels);

    uint8_t buf[4096];
    size_t n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                            "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]},\"__metadata__\":{}}", 24);
    load_st(buf, n, NULL);
    for (size_t cut = 0; cut < n; cut++) load_st(buf, cut, NULL);
    uint8_t mut[4096];
    for (int it = 0; it < 3000; it++) {
        memcpy(mut, buf, n);
        int k = 1 + (int)(splitmix64(&rng) % 4);
        for (int j = 0; j < k; j++) mut[splitmix64(&rng) % n] = (uint8_t)splitmix64(&rng);
        load_st(mut, n, NULL);
    }
    /* Each reason a file is refused, by its message. */
    n = make_st(buf, "[1,2]", 0);
    load_st(buf, n, "not a JSON object");
    n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8);
    load_st(buf, n, "data_offsets out of the file");
    n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    load_st(buf, n, "its shape needs 12");
    n = make_st(buf, "{\"a\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2);
    load_st(buf, n, "dtype U16 is not supported");
    n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8);
    load_st(buf, n, "overlap");
    n = make_st(buf, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    load_st(buf, n, "needs dtype, shape and data_offsets");
    memset(buf, 0xff, 8);
    load_st(buf, 16, "past the end of the file");
    load_st(buf, 3, "too short");

    /* ONNX errors that name what is wrong. */
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    CHECK(fc_graph_from_onnx_data(ctx, "x.onnx", "\xff\xff\xff", 3, NULL, NULL, 0, NULL, &g, NULL) == FC_ERR_INPUT &&
              strstr(fc_last_error(ctx), "x.onnx: error: not a valid ONNX model"),
          "malformed: %s", fc_last_error(ctx));
    CHECK(fc_graph_from_onnx(ctx, "/usr/share/libonnx-testdata/data/node/test_det_2d/model.onnx",
                             NULL, 0, NULL, &g, NULL) != FC_OK &&
              strstr(fc_last_error(ctx), "node 'y' (Det, opset 11): op_type 'Det' is not supported"),
          "unsupported op: %s", fc_last_error(ctx));
    fc_context_free(ctx);

    if (failures) printf("%d failures\n", failures);
    else printf("test_onnx_fuzz: ok\n");
    return failures != 0;
}
