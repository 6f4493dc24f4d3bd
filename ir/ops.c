/* ops.c - the op table, built from ops.def, and its attribute signatures. */
#include "ir.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const fc_op_info fc_op_table[FC_OP_COUNT] = {
#define X(id, name, min_in, max_in, kind, cost, weight, attrs) {name, min_in, max_in, FC_KIND_##kind, FC_COST_##cost, weight, attrs},
#include "ops.def"
#undef X
};

fc_op fc_op_from_name(const char *name, size_t len) {
    for (int i = 0; i < FC_OP_COUNT; i++)
        if (strlen(fc_op_table[i].name) == len && memcmp(fc_op_table[i].name, name, len) == 0) return (fc_op)i;
    return FC_OP_COUNT;
}

bool fc_op_is_unary(fc_op op) { return op >= FC_OP_NEG && op <= FC_OP_ERF; }
bool fc_op_is_binary(fc_op op) { return op >= FC_OP_ADD && op <= FC_OP_POW; }
bool fc_op_is_compare(fc_op op) { return op >= FC_OP_EQ && op <= FC_OP_GE; }
bool fc_op_is_reduce(fc_op op) { return op >= FC_OP_REDUCE_SUM && op <= FC_OP_REDUCE_MEAN; }
bool fc_op_is_elementwise(fc_op op) {
    return fc_op_is_unary(op) || fc_op_is_binary(op) || fc_op_is_compare(op) || op == FC_OP_WHERE || op == FC_OP_CAST;
}

bool fc_op_is_view(fc_op op) {
    switch (op) {
    case FC_OP_RESHAPE: case FC_OP_PERMUTE: case FC_OP_EXPAND: case FC_OP_SLICE: case FC_OP_CONCAT:
    case FC_OP_SPLIT: case FC_OP_GATHER: case FC_OP_IOTA: case FC_OP_FULL:
        return true;
    default: return false;
    }
}

bool fc_op_is_collective(fc_op op) {
    return op == FC_OP_ALL_REDUCE || op == FC_OP_ALL_GATHER || op == FC_OP_REDUCE_SCATTER;
}

fc_op_cost fc_op_cost_of(fc_op op) { return fc_op_table[op].cost; }
int fc_op_weight(fc_op op) { return fc_op_table[op].weight; }

int fc_node_weight(const fc_node *n) {
    int w = fc_op_table[n->op].weight;
    return fc_op_table[n->op].max_in < 0 && n->nin > 1 ? w + FC_OPERAND_WEIGHT * (n->nin - 1) : w;
}

/* Signatures are parsed once into this table. */
static fc_attr_spec specs[FC_OP_COUNT][FC_MAX_ATTRS];
static int nspecs[FC_OP_COUNT];
static pthread_once_t specs_once = PTHREAD_ONCE_INIT;

static fc_attr_kind kind_from_text(const char *s, size_t n) {
    static const struct { const char *name; fc_attr_kind kind; } kinds[] = {
        {"int", FC_ATTR_INT}, {"ints", FC_ATTR_INTS}, {"dims", FC_ATTR_DIMS},
        {"bool", FC_ATTR_BOOL}, {"float", FC_ATTR_FLOAT}, {"dtype", FC_ATTR_DTYPE},
        {"strs", FC_ATTR_STRS},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i].name) == n && memcmp(kinds[i].name, s, n) == 0) return kinds[i].kind;
    FC_UNREACHABLE("bad attribute kind in ops.def");
}

static void parse_specs(void) {
    for (int op = 0; op < FC_OP_COUNT; op++) {
        const char *p = fc_op_table[op].attrs;
        while (*p) {
            while (*p == ' ') p++;
            if (!*p) break;
            FC_ASSERT(nspecs[op] < FC_MAX_ATTRS);
            fc_attr_spec *s = &specs[op][nspecs[op]++];
            const char *colon = strchr(p, ':');
            FC_ASSERT(colon && (size_t)(colon - p) < sizeof s->name);
            memcpy(s->name, p, (size_t)(colon - p));
            const char *k = colon + 1, *ke = k;
            while (*ke && *ke != ' ' && *ke != '=') ke++;
            s->kind = kind_from_text(k, (size_t)(ke - k));
            p = ke;
            if (*p == '=') {
                const char *d = ++p;
                while (*p && *p != ' ') p++;
                FC_ASSERT((size_t)(p - d) < sizeof s->default_text);
                s->has_default = true;
                memcpy(s->default_text, d, (size_t)(p - d));
            }
        }
    }
}

int fc_op_attr_specs(fc_op op, const fc_attr_spec **out) {
    pthread_once(&specs_once, parse_specs);
    *out = specs[op];
    return nspecs[op];
}

bool fc_op_list_is_dims(fc_op op) {
    const fc_attr_spec *sp;
    int n = fc_op_attr_specs(op, &sp);
    for (int k = 0; k < n; k++)
        if (sp[k].kind == FC_ATTR_DIMS) return true;
    return false;
}

void fc_attr_field(fc_attrs *a, const char *name, int64_t **i, bool **b, double **f, fc_dtype **dt) {
    *i = NULL; *b = NULL; *f = NULL; *dt = NULL;
    if (!strcmp(name, "axis")) *i = &a->axis;
    else if (!strcmp(name, "start")) *i = &a->start;
    else if (!strcmp(name, "end")) *i = &a->end;
    else if (!strcmp(name, "step")) *i = &a->step;
    else if (!strcmp(name, "keepdim")) *b = &a->keepdim;
    else if (!strcmp(name, "causal")) *b = &a->causal;
    else if (!strcmp(name, "eps")) *f = &a->eps;
    else if (!strcmp(name, "value")) *f = &a->value;
    else if (!strcmp(name, "scale")) *f = &a->scale;
    else if (!strcmp(name, "to") || !strcmp(name, "dtype")) *dt = &a->dtype;
    else if (!strcmp(name, "groups")) *i = &a->groups;
    else if (!strcmp(name, "mode")) *i = &a->mode;
    else if (!strcmp(name, "coord")) *i = &a->coord;
    else if (!strcmp(name, "ceil")) *b = &a->ceil;
    else if (!strcmp(name, "count_pad")) *b = &a->count_pad;
    else if (!strcmp(name, "ranks")) *i = &a->ranks;
    else if (!strcmp(name, "case_sensitive")) *b = &a->case_sensitive;
    /* axes, perm, shape, sizes, window, pads: the list, which has no scalar
     * field; stopwords: strs */
}

void fc_attrs_defaults(fc_op op, fc_attrs *a) {
    memset(a, 0, sizeof *a);
    const fc_attr_spec *sp;
    int n = fc_op_attr_specs(op, &sp);
    for (int k = 0; k < n; k++) {
        if (!sp[k].has_default) continue;
        int64_t *i; bool *b; double *f; fc_dtype *dt;
        fc_attr_field(a, sp[k].name, &i, &b, &f, &dt);
        const char *d = sp[k].default_text;
        if (i) *i = strtoll(d, NULL, 10);
        else if (b) *b = !strcmp(d, "true");
        else if (f) *f = strtod(d, NULL);
        else if (dt) *dt = fc_dtype_from_name(d, strlen(d));
    }
}
