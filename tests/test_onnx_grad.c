/* test_onnx_grad.c - ONNX's Gradient (ai.onnx.preview.training) imported as
 * reverse-mode differentiation: three small models in float64 (between
 * them matmul with 2-D and rank-1 operands, broadcast add and max, tanh,
 * sigmoid, mul, exp, div, log, sub, neg, relu, sqrt, pow, softmax, concat,
 * slice, split, reduce_mean, expand, where, sin, cos, erf, abs, min,
 * reciprocal, reshape, transpose, reduce_sum) are built with protobuf-c,
 * imported, run on the reference interpreter, and their gradients with
 * respect to four inputs compared with central finite differences of their
 * own output; also the errors for an op without a gradient rule (naming
 * the model's node) and for a gradient with respect to an initializer. */
#include "fusec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUSEC_HAVE_ONNX
int main(void) {
    printf("SKIP: built without the ONNX importer\n");
    return 0;
}
#else
#include "check.h"

#include <onnx/onnx.pb-c.h>

/* CHECK, with what was seen printed when it fails. */
#define CHECKF(c, ...) \
    do { bool ok_ = (c); CHECK(ok_); if (!ok_) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* Everything a model is built from, freed at once. */
static void *pool[4096];
static int npool;
static void *keep(size_t n) {
    void *p = calloc(1, n);
    if (!p || npool == (int)(sizeof pool / sizeof *pool)) abort();
    return pool[npool++] = p;
}
static void free_pool(void) {
    while (npool) free(pool[--npool]);
}
static char *str(const char *s) { return strcpy(keep(strlen(s) + 1), s); }

#define DOUBLE ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE

static Onnx__ValueInfoProto *tensor_info(const char *name, int rank, const int64_t *dims) {
    Onnx__TensorShapeProto *sh = keep(sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)rank;
    sh->dim = keep(sizeof *sh->dim * (size_t)(rank ? rank : 1));
    for (int d = 0; d < rank; d++) {
        Onnx__TensorShapeProto__Dimension *dm = keep(sizeof *dm);
        onnx__tensor_shape_proto__dimension__init(dm);
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dm->dim_value = dims[d];
        sh->dim[d] = dm;
    }
    Onnx__TypeProto__Tensor *tt = keep(sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = DOUBLE;
    tt->shape = sh;
    Onnx__TypeProto *tp = keep(sizeof *tp);
    onnx__type_proto__init(tp);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    Onnx__ValueInfoProto *vi = keep(sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = str(name);
    vi->type = tp;
    return vi;
}

/* A node "op(in, ..) -> out, .." from space-separated name lists. */
static Onnx__NodeProto *node(const char *op, const char *ins, const char *outs) {
    Onnx__NodeProto *n = keep(sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = str(op);
    const char *lists[2] = {ins, outs};
    for (int w = 0; w < 2; w++) {
        char **arr = keep(sizeof *arr * 16);
        size_t cnt = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", lists[w]);
        for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) arr[cnt++] = str(t);
        if (w == 0) n->input = arr, n->n_input = cnt;
        else n->output = arr, n->n_output = cnt;
    }
    n->name = str(n->output[0]);
    return n;
}

static void add_attr(Onnx__NodeProto *n, Onnx__AttributeProto *a) {
    Onnx__AttributeProto **arr = keep(sizeof *arr * (n->n_attribute + 1));
    if (n->n_attribute) memcpy(arr, n->attribute, sizeof *arr * n->n_attribute);
    arr[n->n_attribute++] = a;
    n->attribute = arr;
}

static Onnx__AttributeProto *new_attr(const char *name, Onnx__AttributeProto__AttributeType ty) {
    Onnx__AttributeProto *a = keep(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = str(name);
    a->has_type = 1;
    a->type = ty;
    return a;
}

static ProtobufCBinaryData bytes(const char *s) { return (ProtobufCBinaryData){strlen(s), (uint8_t *)str(s)}; }

/* A Gradient node of y with respect to xs (space-separated), its outputs named d<y>_<x>. */
static Onnx__NodeProto *gradient(const char *xs, const char *y) {
    char outs[256] = "";
    char buf[256];
    snprintf(buf, sizeof buf, "%s", xs);
    Onnx__AttributeProto *a = new_attr("xs", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
    a->strings = keep(sizeof *a->strings * 16);
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        a->strings[a->n_strings++] = bytes(t);
        size_t l = strlen(outs);
        snprintf(outs + l, sizeof outs - l, "%sd%s_%s", l ? " " : "", y, t);
    }
    Onnx__NodeProto *n = node("Gradient", xs, outs);
    n->name = str("grad");
    n->domain = str("ai.onnx.preview.training");
    add_attr(n, a);
    Onnx__AttributeProto *ay = new_attr("y", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    ay->has_s = 1;
    ay->s = bytes(y);
    add_attr(n, ay);
    return n;
}

/* A 1-D initializer of int64 (iv) or double (fv) values. */
static Onnx__TensorProto *tensor_1d(const char *name, int n, const int64_t *iv, const double *fv) {
    Onnx__TensorProto *t = keep(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = str(name);
    t->has_data_type = 1;
    t->data_type = iv ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64 : DOUBLE;
    t->n_dims = 1;
    t->dims = keep(sizeof *t->dims);
    t->dims[0] = n;
    if (iv) {
        t->n_int64_data = (size_t)n;
        t->int64_data = memcpy(keep(sizeof *iv * (size_t)n), iv, sizeof *iv * (size_t)n);
    } else {
        t->n_double_data = (size_t)n;
        t->double_data = memcpy(keep(sizeof *fv * (size_t)n), fv, sizeof *fv * (size_t)n);
    }
    return t;
}

typedef struct model {
    Onnx__GraphProto g;
    Onnx__NodeProto *nodes[64];
    Onnx__ValueInfoProto *ins[8], *outs[8];
    Onnx__TensorProto *inits[16];
} model;

static void model_init(model *m) {
    memset(m, 0, sizeof *m);
    onnx__graph_proto__init(&m->g);
    m->g.name = str("grad_test");
    m->g.node = m->nodes;
    m->g.input = m->ins;
    m->g.output = m->outs;
    m->g.initializer = m->inits;
}

/* The model's bytes (malloc'd). */
static uint8_t *pack(model *m, size_t *len) {
    Onnx__OperatorSetIdProto o1 = ONNX__OPERATOR_SET_ID_PROTO__INIT, o2 = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    o1.domain = str("");
    o1.has_version = 1;
    o1.version = 17;
    o2.domain = str("ai.onnx.preview.training");
    o2.has_version = 1;
    o2.version = 1;
    Onnx__OperatorSetIdProto *ops[2] = {&o1, &o2};
    Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
    mp.has_ir_version = 1;
    mp.ir_version = 8;
    mp.n_opset_import = 2;
    mp.opset_import = ops;
    mp.graph = &m->g;
    *len = onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = malloc(*len);
    onnx__model_proto__pack(&mp, buf);
    return buf;
}

#define NX 4
static const char *xnames[NX] = {"x", "w", "b", "c"};
static const int xrank[NX] = {2, 2, 1, 2};
static const int64_t xdims[NX][2] = {{2, 3}, {3, 4}, {4, 0}, {1, 4}};

/* Integer attributes "name=v" or lists "name=[v,v]", space-separated. */
static void int_attrs(Onnx__NodeProto *n, const char *text) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        *eq = 0;
        bool list = eq[1] == '[';
        Onnx__AttributeProto *a = new_attr(t, list ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS
                                                   : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
        if (list) {
            a->ints = keep(sizeof *a->ints * 8);
            for (char *v = eq + 2; v && *v; v = strchr(v, ',') ? strchr(v, ',') + 1 : NULL) a->ints[a->n_ints++] = atoll(v);
        } else {
            a->has_i = 1;
            a->i = atoll(eq + 1);
        }
        add_attr(n, a);
    }
}

/* The forward models: nodes {op, inputs, outputs, attributes}, over the
 * inputs x, w, b, c and the initializers below; each ends in a scalar y. */
typedef const char *const node_text[4];

/* y = sum(transpose(reshape(sqrt(relu(-u)^2 + k), [4, 2])) * u), where
 * u = tanh(x @ w + b) * sigmoid(x @ w) / (exp(c) + k) - log(exp(c) + k). */
static node_text model_a[] = {
    {"MatMul", "x w", "h", ""},     {"Add", "h b", "a", ""},         {"Tanh", "a", "t", ""},
    {"Sigmoid", "h", "s", ""},      {"Mul", "t s", "ts", ""},        {"Exp", "c", "e", ""},
    {"Add", "e k", "den", ""},      {"Div", "ts den", "q", ""},      {"Log", "den", "l", ""},
    {"Sub", "q l", "u", ""},        {"Neg", "u", "nu", ""},          {"Relu", "nu", "r", ""},
    {"Mul", "r r", "r2", ""},       {"Add", "r2 k", "rk", ""},       {"Sqrt", "rk", "sq", ""},
    {"Reshape", "sq shape42", "v", ""}, {"Transpose", "v", "p", ""}, {"Mul", "p u", "pu", ""},
    {"ReduceSum", "pu", "y", "keepdims=0"},
};

/* Softmax, a broadcast max, pow of two computed operands, concat, slice,
 * split, reduce_mean, expand, where, sin, abs and a matmul with a rank-1
 * right operand. */
static node_text model_b[] = {
    {"MatMul", "x w", "h", ""},            {"Softmax", "h", "sm", "axis=1"},
    {"Max", "sm c", "mx", ""},             {"Exp", "b", "eb", ""},
    {"Pow", "eb c", "pw", ""},             {"Concat", "mx pw", "cc", "axis=0"},
    {"Slice", "cc one three zero", "sl", ""}, {"Split", "sl split13", "sp1 sp2", "axis=1"},
    {"ReduceMean", "sp2", "rm", "axes=[1] keepdims=1"}, {"Expand", "sp1 shape23", "ex", ""},
    {"Greater", "x zero_f", "pos", ""},    {"Sin", "x", "sx", ""},
    {"Where", "pos ex sx", "wh", ""},      {"MatMul", "w b", "mv", ""},
    {"Abs", "mv", "av", ""},               {"Mul", "wh av", "m1", ""},
    {"Add", "m1 rm", "t", ""},             {"ReduceSum", "t", "y", "keepdims=0"},
};

/* erf, cos, a min, a reciprocal. */
static node_text model_c[] = {
    {"Erf", "x", "e1", ""},         {"Cos", "x", "c1", ""},         {"Min", "e1 c1", "mn", ""},
    {"Add", "c k", "ck", ""},       {"Reciprocal", "ck", "rc", ""}, {"MatMul", "mn w", "mw", ""},
    {"Mul", "mw rc", "p", ""},      {"Add", "p b", "pb", ""},       {"ReduceSum", "pb", "y", "keepdims=0"},
};

static model *forward_model(node_text *text, size_t nnodes) {
    model *m = keep(sizeof *m);
    model_init(m);
    for (int i = 0; i < NX; i++) m->ins[m->g.n_input++] = tensor_info(xnames[i], xrank[i], xdims[i]);
    static const int64_t shape42[2] = {4, 2}, shape23[2] = {2, 3}, split13[2] = {1, 3}, one = 1, three = 3, zero = 0;
    static const double kval = 1.5, zero_f = 0;
    m->inits[m->g.n_initializer++] = tensor_1d("shape42", 2, shape42, NULL);
    m->inits[m->g.n_initializer++] = tensor_1d("shape23", 2, shape23, NULL);
    m->inits[m->g.n_initializer++] = tensor_1d("split13", 2, split13, NULL);
    m->inits[m->g.n_initializer++] = tensor_1d("one", 1, &one, NULL);
    m->inits[m->g.n_initializer++] = tensor_1d("three", 1, &three, NULL);
    m->inits[m->g.n_initializer++] = tensor_1d("zero", 1, &zero, NULL);
    static const char *const scalars[2] = {"k", "zero_f"};
    for (int i = 0; i < 2; i++) {
        Onnx__TensorProto *k = tensor_1d(scalars[i], 1, NULL, i ? &zero_f : &kval);
        k->n_dims = 0;
        m->inits[m->g.n_initializer++] = k;
    }
    for (size_t i = 0; i < nnodes; i++) {
        Onnx__NodeProto *n = node(text[i][0], text[i][1], text[i][2]);
        int_attrs(n, text[i][3]);
        m->nodes[m->g.n_node++] = n;
    }
    static const int64_t none[1] = {0};
    m->outs[m->g.n_output++] = tensor_info("y", 0, none);
    return m;
}

static fc_graph *import(model *m, fc_context *ctx, fc_status *st) {
    size_t len;
    uint8_t *buf = pack(m, &len);
    fc_graph *g = NULL;
    fc_weights *w = NULL;
    *st = fc_graph_from_onnx_data(ctx, "grad.onnx", buf, len, NULL, NULL, 0, NULL, &g, &w);
    fc_weights_free(w);
    free(buf);
    return g;
}

static int64_t numel(int i) { return xrank[i] == 1 ? xdims[i][0] : xdims[i][0] * xdims[i][1]; }

static void set_inputs(fc_tensor *in, double *data[NX]) {
    for (int i = 0; i < NX; i++) {
        in[i].dtype = FC_F64;
        in[i].rank = xrank[i];
        for (int d = 0; d < xrank[i]; d++) in[i].shape[d] = xdims[i][d];
        in[i].data = data[i];
    }
}

/* y at the inputs. */
static double run_y(fc_graph *g, double *data[NX]) {
    fc_tensor in[NX], out[1 + NX];
    set_inputs(in, data);
    memset(out, 0, sizeof out);
    int nout = fc_graph_num_outputs(g);
    double y = NAN;
    if (fc_run_reference_exact(g, in, NX, out, nout) == FC_OK) y = ((double *)out[0].data)[0];
    for (int i = 0; i < nout; i++) fc_tensor_release(&out[i]);
    return y;
}

static void test_against_finite_differences(node_text *text, size_t nnodes) {
    fc_context *ctx = fc_context_new();
    model *m = forward_model(text, nnodes);
    fc_status st;
    fc_graph *fwd = import(m, ctx, &st);
    CHECKF(st == FC_OK, "forward import: %s", fc_last_error(ctx));
    m->nodes[m->g.n_node++] = gradient("x w b c", "y");
    for (int i = 0; i < NX; i++) {
        char name[16];
        snprintf(name, sizeof name, "dy_%s", xnames[i]);
        m->outs[m->g.n_output++] = tensor_info(name, xrank[i], xdims[i]);
    }
    fc_graph *g = import(m, ctx, &st);
    CHECKF(st == FC_OK, "gradient import: %s", fc_last_error(ctx));
    if (!fwd || !g) { fc_graph_free(fwd); fc_graph_free(g); fc_context_free(ctx); return; }
    CHECKF(fc_graph_num_outputs(g) == 1 + NX, "%d outputs", fc_graph_num_outputs(g));
    /* Inputs from a fixed sequence, away from relu's kink at 0. */
    double buf[NX][12], *data[NX];
    for (int i = 0; i < NX; i++) {
        data[i] = buf[i];
        for (int64_t j = 0; j < numel(i); j++) buf[i][j] = 0.9 * sin(1.7 * (double)(i * 12 + j) + 0.3);
    }
    fc_tensor in[NX], out[1 + NX];
    set_inputs(in, data);
    memset(out, 0, sizeof out);
    st = fc_run_reference_exact(g, in, NX, out, 1 + NX);
    CHECKF(st == FC_OK, "run: %s", fc_last_error(ctx));
    if (st == FC_OK) {
        double y0 = run_y(fwd, data);
        CHECKF(fabs(((double *)out[0].data)[0] - y0) < 1e-12, "y %g vs the forward model's %g", ((double *)out[0].data)[0], y0);
        int nonzero = 0;
        for (int i = 0; i < NX; i++) {
            CHECKF(out[1 + i].dtype == FC_F64 && fc_tensor_numel(&out[1 + i]) == numel(i), "d%s: dtype or shape", xnames[i]);
            const double *grad = out[1 + i].data;
            for (int64_t j = 0; j < numel(i); j++) {
                const double h = 1e-5, keepv = buf[i][j];
                buf[i][j] = keepv + h;
                double yp = run_y(fwd, data);
                buf[i][j] = keepv - h;
                double ym = run_y(fwd, data);
                buf[i][j] = keepv;
                double fd = (yp - ym) / (2 * h);
                CHECKF(fabs(grad[j] - fd) <= 1e-6 * (1 + fabs(fd)), "dy/d%s[%lld]: %.12g, finite differences %.12g",
                      xnames[i], (long long)j, grad[j], fd);
                nonzero += fabs(fd) > 1e-3;
            }
        }
        CHECKF(nonzero > 12, "only %d gradient elements away from zero: the test would not see a wrong rule", nonzero);
    }
    for (int i = 0; i < 1 + NX; i++) fc_tensor_release(&out[i]);
    fc_graph_free(fwd);
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* An op without a rule on the path is an error naming the model's node;
 * one off the path (not depending on the xs) is not. */
static void test_errors(void) {
    fc_context *ctx = fc_context_new();
    static const int64_t d23[2] = {2, 3}, none[1] = {0};
    model *m = keep(sizeof *m);
    model_init(m);
    m->ins[m->g.n_input++] = tensor_info("x", 2, d23);
    m->ins[m->g.n_input++] = tensor_info("z", 2, d23);
    m->nodes[m->g.n_node++] = node("Floor", "z", "fz"); /* no rule, but off the path */
    m->nodes[m->g.n_node++] = node("Add", "x fz", "s");
    m->nodes[m->g.n_node++] = node("ReduceMax", "s", "my_max");
    m->nodes[m->g.n_node++] = gradient("x", "my_max");
    m->outs[m->g.n_output++] = tensor_info("dmy_max_x", 2, d23);
    fc_status st;
    fc_graph *g = import(m, ctx, &st);
    CHECKF(st == FC_ERR_UNSUPPORTED && !g, "reduce_max on the path: status %d", (int)st);
    const char *e = fc_last_error(ctx);
    CHECKF(strstr(e, "node 'grad' (Gradient") && strstr(e, "'reduce_max' (made for node 'my_max')") &&
          strstr(e, "no gradient rule"), "message: %s", e);
    fc_graph_free(g);

    /* The same without the max: the floor is a constant to the gradient. */
    m->g.n_node = 2;
    m->nodes[m->g.n_node++] = gradient("x", "s");
    m->outs[0] = tensor_info("ds_x", 2, d23);
    g = import(m, ctx, &st);
    CHECKF(st == FC_OK, "floor off the path: %s", fc_last_error(ctx));
    fc_graph_free(g);

    /* With respect to an initializer: refused, since the importer folds
     * what is computed from known data. */
    model *m2 = keep(sizeof *m2);
    model_init(m2);
    static const double wv[3] = {1, 2, 3};
    m2->ins[m2->g.n_input++] = tensor_info("x", 2, d23);
    m2->inits[m2->g.n_initializer++] = tensor_1d("wt", 3, NULL, wv);
    m2->nodes[m2->g.n_node++] = node("Mul", "x wt", "y");
    m2->nodes[m2->g.n_node++] = gradient("wt", "y");
    m2->outs[m2->g.n_output++] = tensor_info("dy_wt", 1, none);
    g = import(m2, ctx, &st);
    CHECKF(st == FC_ERR_UNSUPPORTED && strstr(fc_last_error(ctx), "x 'wt' is known data at import"), "initializer: %s",
          fc_last_error(ctx));
    fc_graph_free(g);
    fc_context_free(ctx);
}

int main(void) {
    test_against_finite_differences(model_a, sizeof model_a / sizeof *model_a);
    test_against_finite_differences(model_b, sizeof model_b / sizeof *model_b);
    test_against_finite_differences(model_c, sizeof model_c / sizeof *model_c);
    test_errors();
    free_pool();
    return check_report("test_onnx_grad");
}
#endif
