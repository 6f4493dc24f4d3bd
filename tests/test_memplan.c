/* test_memplan.c - the memory plan (passes/memplan.c) on plans built by
 * hand: small graphs from the builder API, one group per node (or a few
 * chosen groupings), inputs and outputs filled as fc_pass_schedule would.
 *
 * Checked on every plan, by brute force over all pairs: no two values that
 * are live at the same time overlap in the arena; every offset is 256-byte
 * aligned and inside the arena; every intermediate has an offset and every
 * parameter and result has none; the sum and the peak are what they say.
 * Then: a chain of N groups needs two buffers; reuse makes the peak smaller
 * than the sum; aliases share their source's storage and lifetime; the
 * storage classes (fc_plan_classes_make); random DAGs; allocation
 * failures. */
#include "check.h"
#include "passes/passes.h"

#include <stdlib.h>

/* ---- building plans by hand --------------------------------------------- */

static void plan_init(fc_plan *p, fc_graph *g) {
    memset(p, 0, sizeof *p);
    p->g = g;
    fc_arena_init(&p->arena, g->ctx);
}

static fc_value **copy_values(fc_plan *p, fc_value *const *vs, int n) {
    fc_value **a = fc_arena_alloc(&p->arena, sizeof *a * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) a[i] = vs[i];
    return a;
}

/* Append a group of `kind` with the given nodes, inputs and outputs. */
static fc_group *add_group(fc_plan *p, fc_group_kind kind, fc_node *const *nodes, int nnodes, fc_value *const *ins,
                           int nin, fc_value *const *outs, int nout) {
    fc_grow(&p->arena, (void **)&p->groups, &p->cap_groups, p->ngroups + 1, sizeof *p->groups);
    fc_group *gr = fc_arena_alloc(&p->arena, sizeof *gr);
    gr->id = p->ngroups;
    gr->kind = kind;
    gr->nodes = (fc_node **)copy_values(p, (fc_value *const *)nodes, nnodes);
    gr->nnodes = gr->cap_nodes = nnodes;
    gr->inputs = copy_values(p, ins, nin);
    gr->ninputs = nin;
    gr->outputs = copy_values(p, outs, nout);
    gr->noutputs = nout;
    p->groups[p->ngroups++] = gr;
    return gr;
}

/* A group of one node: it reads the node's operands and writes its result. */
static fc_group *node_group(fc_plan *p, fc_group_kind kind, fc_value *result) {
    fc_node *n = result->def;
    fc_value *ins[8];
    int nin = 0;
    for (int i = 0; i < n->nin; i++)
        if (!n->in[i]->weak) ins[nin++] = n->in[i];
    return add_group(p, kind, &n, 1, ins, nin, &result, 1);
}

/* ---- the brute-force checks ---------------------------------------------- */

static bool is_result(const fc_graph *g, const fc_value *v) {
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v) return true;
    return false;
}

/* The value an alias output views (its group's external source), or v. */
static const fc_value *storage_root(const fc_plan *p, const fc_value *v) {
    for (int pos = 0; pos < p->ngroups; pos++) {
        const fc_group *gr = p->groups[pos];
        if (gr->kind != FC_GROUP_ALIAS) continue;
        for (int i = 0; i < gr->noutputs; i++)
            if (gr->outputs[i] == v) return storage_root(p, gr->inputs[0]);
    }
    return v;
}

/* Lifetime of v's storage class: first write .. last read of any member. */
static void lifetime(const fc_plan *p, const fc_value *v, int *first, int *last) {
    const fc_value *r = storage_root(p, v);
    *first = *last = -1;
    for (int pos = 0; pos < p->ngroups; pos++) {
        const fc_group *gr = p->groups[pos];
        for (int i = 0; i < gr->noutputs; i++)
            if (storage_root(p, gr->outputs[i]) == r) {
                if (*first < 0) *first = pos;
                *last = pos;
            }
        for (int i = 0; i < gr->ninputs; i++)
            if (storage_root(p, gr->inputs[i]) == r) *last = pos;
    }
}

/* Every value a group writes. */
static int written_values(const fc_plan *p, const fc_value **out, int cap) {
    int n = 0;
    for (int pos = 0; pos < p->ngroups; pos++)
        for (int i = 0; i < p->groups[pos]->noutputs && n < cap; i++) out[n++] = p->groups[pos]->outputs[i];
    return n;
}

static void check_plan(const fc_plan *p) {
    const fc_graph *g = p->g;
    CHECK(p->offset != NULL);
    if (!p->offset) return;
    CHECK(p->arena_bytes % 256 == 0);
    CHECK(p->arena_bytes >= 0 && p->intermediate_bytes >= 0);

    const fc_value *vals[512];
    int n = written_values(p, vals, 512);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const fc_value *v = vals[i], *r = storage_root(p, v);
        bool in_result_class = false;
        for (int k = 0; k < g->noutputs; k++) in_result_class |= storage_root(p, g->outputs[k]) == r;
        bool arena = r->param_index < 0 && !in_result_class;
        CHECK_EQ_INT(p->offset[v->id] >= 0, arena);
        if (p->offset[v->id] < 0) continue;
        CHECK_EQ_INT(p->offset[v->id] % 256, 0);
        CHECK(p->offset[v->id] + fc_value_bytes(v) <= p->arena_bytes);
        if (r == v) sum += fc_value_bytes(v);
        /* An alias has exactly its source's storage. */
        CHECK_EQ_INT(p->offset[v->id], p->offset[r->id]);
    }
    CHECK_EQ_INT(p->intermediate_bytes, sum);
    for (int i = 0; i < g->nparams; i++) CHECK_EQ_INT(p->offset[g->params[i]->id], -1);
    for (int i = 0; i < g->noutputs; i++) CHECK_EQ_INT(p->offset[g->outputs[i]->id], -1);

    /* No two values of different classes that are live at once overlap. */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const fc_value *a = vals[i], *b = vals[j];
            if (p->offset[a->id] < 0 || p->offset[b->id] < 0) continue;
            if (storage_root(p, a) == storage_root(p, b)) continue;
            int fa, la, fb, lb;
            lifetime(p, a, &fa, &la);
            lifetime(p, b, &fb, &lb);
            bool live_together = fa <= lb && fb <= la;
            int64_t a0 = p->offset[a->id], a1 = a0 + fc_value_bytes(a);
            int64_t b0 = p->offset[b->id], b1 = b0 + fc_value_bytes(b);
            bool overlap = a0 < b1 && b0 < a1;
            if (live_together && overlap)
                fprintf(stderr, "overlap: %%%d [%d,%d] @%lld+%lld and %%%d [%d,%d] @%lld+%lld\n", a->id, fa, la,
                        (long long)a0, (long long)(a1 - a0), b->id, fb, lb, (long long)b0, (long long)(b1 - b0));
            CHECK(!(live_together && overlap));
        }
}

/* ---- tests ---------------------------------------------------------------- */

/* x -> t0 -> t1 -> ... -> t(N-1) (result), one group each: the arena needs
 * two buffers (a group reads one and writes the other), whatever N is. */
static void test_chain(fc_context *ctx, int N) {
    fc_graph *g = fc_graph_new(ctx, "chain");
    fc_dim d[2] = {32, 32}; /* 4 KiB of f32 */
    fc_value *v = fc_param(g, "x", FC_F32, 2, d);
    fc_value *t[64];
    for (int i = 0; i < N; i++) t[i] = v = (i % 2) ? fc_exp(g, v) : fc_neg(g, v);
    fc_graph_return(g, 1, &v);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);

    fc_plan p;
    plan_init(&p, g);
    for (int i = 0; i < N; i++) node_group(&p, FC_GROUP_POINTWISE, t[i]);
    CHECK_EQ_INT(fc_pass_memplan(&p), FC_OK);
    check_plan(&p);
    CHECK_EQ_INT(p.intermediate_bytes, (int64_t)(N - 1) * 4096);
    CHECK_EQ_INT(p.arena_bytes, N >= 3 ? 2 * 4096 : (int64_t)(N - 1) * 4096);
    if (N >= 4) CHECK(p.arena_bytes < p.intermediate_bytes);
    /* Neighbours never share; every second one may. */
    for (int i = 0; i + 2 < N; i++) CHECK(p.offset[t[i]->id] != p.offset[t[i + 1]->id]);
    fc_arena_release(&p.arena);
    fc_graph_free(g);
}

/* Lifetimes that overlap in a diamond; sizes that differ; a value that is
 * read two groups later. */
static void test_diamond(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "diamond");
    fc_dim big[1] = {1000}, row[2] = {10, 100};
    fc_value *x = fc_param(g, "x", FC_F32, 1, big);
    fc_value *a = fc_exp(g, x);                                 /* g0: 4000 B, read by g1 g2 */
    fc_value *b = fc_neg(g, a);                                 /* g1 */
    fc_value *c = fc_sin(g, a);                                 /* g2 */
    fc_value *d = fc_add(g, b, c);                              /* g3 */
    fc_value *r = fc_reshape(g, d, 2, row);                     /* g4 (a copy here: pointwise) */
    int ax = 1;
    fc_value *s = fc_reduce_sum(g, r, 1, &ax, false);           /* g5: 40 B */
    fc_value *out = fc_add(g, s, fc_scalar(g, 1.0));            /* g6: result */
    fc_graph_return(g, 1, &out);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);

    fc_plan p;
    plan_init(&p, g);
    fc_value *seq[] = {a, b, c, d, r, s, out};
    for (int i = 0; i < 7; i++) node_group(&p, i == 5 ? FC_GROUP_REDUCE : FC_GROUP_POINTWISE, seq[i]);
    CHECK_EQ_INT(fc_pass_memplan(&p), FC_OK);
    check_plan(&p);
    /* a, b, c live at once (g2 reads a while b waits for g3). */
    CHECK(p.arena_bytes >= 3 * 4096);
    CHECK(p.arena_bytes < p.intermediate_bytes + 6 * 256);
    fc_arena_release(&p.arena);
    fc_graph_free(g);
}

/* An alias group: its output shares its source's offset, and the source
 * stays live until the alias's last reader. */
static void test_alias(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "alias");
    fc_dim d[1] = {1024}, d2[2] = {32, 32};
    fc_value *x = fc_param(g, "x", FC_F32, 1, d);
    fc_value *a = fc_exp(g, x);               /* g0 */
    fc_value *v = fc_reshape(g, a, 2, d2);    /* g1: alias of a */
    fc_value *y = fc_reshape(g, x, 2, d2);    /* g2: alias of the param */
    fc_value *b = fc_sin(g, y);               /* g3: written while a (via v) is live */
    fc_value *c = fc_mul(g, v, b);            /* g4: reads v (so a) and b */
    fc_value *e = fc_neg(g, c);               /* g5: a and b are dead: reuse */
    fc_value *f = fc_exp(g, e);               /* g6 */
    fc_value *w = fc_reshape(g, f, 1, d);     /* g7: alias that is a result */
    fc_graph_return(g, 1, &w);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);

    fc_plan p;
    plan_init(&p, g);
    node_group(&p, FC_GROUP_POINTWISE, a);
    node_group(&p, FC_GROUP_ALIAS, v);
    node_group(&p, FC_GROUP_ALIAS, y);
    node_group(&p, FC_GROUP_POINTWISE, b);
    node_group(&p, FC_GROUP_POINTWISE, c);
    node_group(&p, FC_GROUP_POINTWISE, e);
    node_group(&p, FC_GROUP_POINTWISE, f);
    node_group(&p, FC_GROUP_ALIAS, w);
    CHECK_EQ_INT(fc_pass_memplan(&p), FC_OK);
    check_plan(&p);
    CHECK(p.offset[a->id] >= 0);
    CHECK_EQ_INT(p.offset[v->id], p.offset[a->id]);
    CHECK_EQ_INT(p.offset[y->id], -1); /* the caller's input buffer */
    CHECK_EQ_INT(p.offset[f->id], -1); /* written straight into the result buffer */
    CHECK_EQ_INT(p.offset[w->id], -1);
    /* a (through v) is live until g4: b and c may not use its memory. */
    CHECK(p.offset[b->id] != p.offset[a->id]);
    CHECK(p.offset[c->id] != p.offset[a->id]);
    /* Classes a+v, b, c, e: a, b and c are live at g4; e reuses a or b. */
    CHECK_EQ_INT(p.intermediate_bytes, 4 * 4096);
    CHECK_EQ_INT(p.arena_bytes, 3 * 4096);
    fc_arena_release(&p.arena);
    fc_graph_free(g);
}

/* The classes the memory plan and the runtimes share: an alias joins its
 * source's class (through a chain of aliases), a class's result slot is its
 * first graph result, and values the plan never names are NULL. */
static void test_classes(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "classes");
    fc_dim d[1] = {64}, d2[2] = {8, 8};
    fc_value *x = fc_param(g, "x", FC_F32, 1, d);
    fc_value *z = fc_param(g, "z", FC_F32, 1, d); /* read by nothing */
    fc_value *t = fc_exp(g, x);                   /* inside g0, not written */
    fc_value *a = fc_neg(g, t);                   /* g0 */
    fc_value *v = fc_reshape(g, a, 2, d2);        /* g1: alias of a */
    fc_value *u = fc_reshape(g, v, 1, d);         /* g2: alias of v, so of a */
    fc_value *y = fc_reshape(g, x, 2, d2);        /* g3: alias of the param */
    fc_value *b = fc_sin(g, y);                   /* g4 */
    fc_value *outs[4] = {v, u, y, b};
    fc_graph_return(g, 4, outs);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);

    fc_plan p;
    plan_init(&p, g);
    fc_node *g0[2] = {t->def, a->def};
    add_group(&p, FC_GROUP_POINTWISE, g0, 2, &x, 1, &a, 1);
    node_group(&p, FC_GROUP_ALIAS, v);
    node_group(&p, FC_GROUP_ALIAS, u);
    node_group(&p, FC_GROUP_ALIAS, y);
    node_group(&p, FC_GROUP_POINTWISE, b);
    fc_plan_classes c;
    CHECK_EQ_INT(fc_plan_classes_make(ctx, &p, &c), FC_OK);
    CHECK_EQ_INT(c.nvalues, g->next_value_id);
    CHECK(c.val[x->id] == x && c.val[z->id] == z && c.val[a->id] == a && c.val[u->id] == u);
    CHECK(c.val[t->id] == NULL);
    CHECK_EQ_INT(c.root[x->id], x->id);
    CHECK_EQ_INT(c.root[z->id], z->id);
    CHECK_EQ_INT(c.root[a->id], a->id);
    CHECK_EQ_INT(c.root[v->id], a->id);
    CHECK_EQ_INT(c.root[u->id], a->id);
    CHECK_EQ_INT(c.root[y->id], x->id);
    CHECK_EQ_INT(c.root[b->id], b->id);
    CHECK_EQ_INT(c.result_slot[a->id], 0); /* v, the first of v and u */
    CHECK_EQ_INT(c.result_slot[x->id], 2);
    CHECK_EQ_INT(c.result_slot[b->id], 3);
    CHECK_EQ_INT(c.result_slot[z->id], -1);
    fc_plan_classes_free(ctx, &c);
    CHECK(c.val == NULL && c.root == NULL && c.result_slot == NULL);
    fc_plan_classes_free(ctx, &c); /* an empty one is fine */

    /* Allocation failures leave c empty. */
    for (long n = 1; n <= 3; n++) {
        fc_context_fail_alloc_after(ctx, n);
        fc_status st = fc_plan_classes_make(ctx, &p, &c);
        fc_context_fail_alloc_after(ctx, 0);
        CHECK_EQ_INT(st, FC_ERR_NOMEM);
        CHECK(c.val == NULL && c.root == NULL && c.result_slot == NULL);
    }
    fc_clear_error(ctx);
    fc_arena_release(&p.arena);
    fc_graph_free(g);
}

/* A multi-output group (horizontal fusion) and a value written but read by
 * nobody later: it still gets storage of its own for its writer. */
static void test_multi_output(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "multi");
    fc_dim d[1] = {300}; /* 1200 B: rounded to 1280 in the arena */
    fc_value *x = fc_param(g, "x", FC_F32, 1, d);
    fc_value *a = fc_exp(g, x), *b = fc_neg(g, x);
    fc_value *c = fc_add(g, a, b);
    fc_graph_return(g, 1, &c);
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);

    fc_plan p;
    plan_init(&p, g);
    fc_node *ab[2] = {a->def, b->def};
    fc_value *outs[2] = {a, b};
    add_group(&p, FC_GROUP_POINTWISE, ab, 2, &x, 1, outs, 2);
    node_group(&p, FC_GROUP_POINTWISE, c);
    CHECK_EQ_INT(fc_pass_memplan(&p), FC_OK);
    check_plan(&p);
    CHECK_EQ_INT(p.intermediate_bytes, 2400);
    CHECK_EQ_INT(p.arena_bytes, 2 * 1280);
    fc_arena_release(&p.arena);
    fc_graph_free(g);
}

/* Random DAGs of unary, binary and reduction nodes over a few shapes, one
 * group per node, a few results. */
static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(rng_state >> 33) % n;
}

static void test_random(fc_context *ctx, int iters) {
    for (int it = 0; it < iters; it++) {
        fc_graph *g = fc_graph_new(ctx, "random");
        fc_dim shape[2] = {1 + rnd(64), 1 + rnd(300)};
        fc_value *vals[80];
        int nv = 0;
        vals[nv++] = fc_param(g, "x", FC_F32, 2, shape);
        vals[nv++] = fc_param(g, "y", FC_F32, 2, shape);
        int nnodes = 5 + (int)rnd(40);
        for (int k = 0; k < nnodes; k++) {
            /* Prefer recent values so chains form, but reach back too. */
            fc_value *a = vals[nv - 1 - (int)rnd(nv < 6 ? (unsigned)nv : 6u)];
            fc_value *b = NULL;
            for (int tries = 0; tries < 8 && !b; tries++) {
                fc_value *c = vals[rnd((unsigned)nv)];
                if (c->rank == a->rank && c->dims[0] == a->dims[0] && (c->rank < 2 || c->dims[1] == a->dims[1]))
                    b = c;
            }
            fc_value *v;
            unsigned op = rnd(5);
            int ax = -1;
            if (op == 0 && a->rank == 2) v = fc_reduce_max(g, a, 1, &ax, true); /* [r, 1] */
            else if (op == 1 && b) v = fc_mul(g, a, b);
            else if (op == 2 && b) v = fc_add(g, a, b);
            else v = rnd(2) ? fc_exp(g, a) : fc_tanh(g, a);
            vals[nv++] = v;
        }
        fc_value *res[2] = {vals[nv - 1], vals[2 + rnd((unsigned)(nv - 2))]};
        int nres = rnd(2) ? 2 : 1;
        fc_graph_return(g, nres, res);
        CHECK_EQ_INT(fc_graph_status(g), FC_OK);

        /* Groups: one per node; outputs are values used later or results. */
        fc_plan p;
        plan_init(&p, g);
        for (int k = 2; k < nv; k++) {
            fc_value *v = vals[k];
            bool used = is_result(g, v);
            for (int j = k + 1; j < nv && !used; j++)
                for (int q = 0; q < vals[j]->def->nin; q++) used |= vals[j]->def->in[q] == v;
            fc_node *n = v->def;
            fc_value *ins[4];
            int nin = 0;
            for (int q = 0; q < n->nin; q++)
                if (!n->in[q]->weak && (nin == 0 || ins[nin - 1] != n->in[q])) ins[nin++] = n->in[q];
            add_group(&p, fc_op_is_reduce(n->op) ? FC_GROUP_REDUCE : FC_GROUP_POINTWISE, &n, 1, ins, nin, &v,
                      used ? 1 : 0);
        }
        CHECK_EQ_INT(fc_pass_memplan(&p), FC_OK);
        check_plan(&p);
        CHECK(p.arena_bytes <= p.intermediate_bytes + 256 * (int64_t)nv);
        fc_arena_release(&p.arena);
        fc_graph_free(g);
    }
}

/* Every allocation the pass makes can fail: it reports FC_ERR_NOMEM, leaves
 * no offsets behind and leaks nothing (ASan checks). */
static void test_alloc_failures(void) {
    fc_context *ctx = fc_context_new();
    int failures = 0;
    for (long n = 1; n < 100; n++) {
        fc_graph *g = fc_graph_new(ctx, "oom");
        fc_dim d[1] = {64};
        fc_value *x = fc_param(g, "x", FC_F32, 1, d);
        fc_value *a = fc_exp(g, x), *b = fc_neg(g, a), *c = fc_sin(g, b);
        fc_graph_return(g, 1, &c);
        fc_plan p;
        plan_init(&p, g);
        node_group(&p, FC_GROUP_POINTWISE, a);
        node_group(&p, FC_GROUP_POINTWISE, b);
        node_group(&p, FC_GROUP_POINTWISE, c);
        fc_context_fail_alloc_after(ctx, n);
        fc_status st = fc_pass_memplan(&p);
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) {
            check_plan(&p);
            fc_arena_release(&p.arena);
            fc_graph_free(g);
            break;
        }
        failures++;
        CHECK_EQ_INT(st, FC_ERR_NOMEM);
        CHECK(p.offset == NULL && p.arena_bytes == 0);
        CHECK(strstr(fc_last_error(ctx), "out of memory") != NULL);
        fc_arena_release(&p.arena);
        fc_graph_free(g);
    }
    CHECK(failures >= 3); /* the scratch arrays and the offset table */
    fc_context_free(ctx);
}

/* An empty plan (a graph that returns its parameter) needs no arena. */
static void test_empty(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "identity");
    fc_dim d[1] = {8};
    fc_value *x = fc_param(g, "x", FC_F32, 1, d);
    fc_graph_return(g, 1, &x);
    fc_plan p;
    plan_init(&p, g);
    CHECK_EQ_INT(fc_pass_memplan(&p), FC_OK);
    CHECK_EQ_INT(p.arena_bytes, 0);
    CHECK_EQ_INT(p.intermediate_bytes, 0);
    CHECK_EQ_INT(p.offset[x->id], -1);
    fc_arena_release(&p.arena);
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    for (int n = 1; n <= 12; n++) test_chain(ctx, n);
    test_diamond(ctx);
    test_alias(ctx);
    test_classes(ctx);
    test_multi_output(ctx);
    test_random(ctx, 300);
    test_empty(ctx);
    test_alloc_failures();
    fc_context_free(ctx);
    return check_report("test_memplan");
}
