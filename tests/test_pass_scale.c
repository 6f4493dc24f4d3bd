/* test_pass_scale.c - the passes stay near-linear and fusion's cost cap
 * holds, on graphs built with the C builder API:
 *
 *   - a chain of elementwise ops is planned, every group within the cap,
 *     and twice the chain does not take four times as long;
 *   - a concat of thousands of computed operands likewise (horizontal
 *     fusion gathers the siblings into capped groups);
 *   - a chain of views canonicalize cannot fold is not inlined into one
 *     kernel: inlined views count against the cap;
 *   - a chain of reductions whose values each have two users plans at
 *     once (the view walk is marked, not exponential);
 *   - transcendental ops fill a group sooner than adds (ops.def weights).
 *
 * Times are compared with each other, not with a constant, so a loaded
 * machine or a sanitizer build slows both sides alike; the one absolute
 * bound is generous (a minute).
 */
#include "check.h"
#include "fusec.h"
#include "passes/passes.h"

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef enum shape { CHAIN, CONCAT, VIEWS, REDUCES, TRANSCENDENTAL } shape;

static fc_graph *build(fc_context *ctx, shape sh, int n) {
    fc_graph *g = fc_graph_new(ctx, "scale");
    fc_dim d[2] = {32, 64};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d), *y = fc_param(g, "y", FC_F32, 2, d), *r = x;
    static fc_value *parts[20000];
    for (int i = 0; i < n; i++) {
        switch (sh) {
        case CHAIN: r = i % 2 ? fc_mul(g, r, y) : fc_add(g, r, y); break;
        case CONCAT: parts[i] = fc_mul(g, x, fc_scalar(g, (double)(i + 1))); break;
        case VIEWS: {
            static const int perm[2] = {1, 0};
            r = i % 2 ? fc_reshape(g, r, 2, d) : fc_permute(g, r, 2, perm);
            break;
        }
        case REDUCES: {
            static const int axes[1] = {1};
            r = fc_sub(g, r, fc_reduce_max(g, r, 1, axes, true));
            break;
        }
        case TRANSCENDENTAL: r = fc_erf(g, r); break;
        }
    }
    if (sh == CONCAT) r = fc_concat(g, n, parts, 0);
    if (sh == VIEWS) r = fc_exp(g, r);
    fc_graph_return(g, 1, &r);
    return g;
}

/* Plan it; check every group within the cap; the seconds it took (or -1). */
static double plan(shape sh, int n, int *ngroups, int *max_nodes) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = build(ctx, sh, n);
    fc_plan p;
    double t0 = now();
    fc_status st = fc_pipeline(g, NULL, &p);
    double t = now() - t0;
    CHECK_EQ_INT(st, FC_OK);
    if (st) {
        fprintf(stderr, "%s\n", fc_last_error(ctx));
        t = -1;
    } else {
        *ngroups = p.ngroups;
        *max_nodes = 0;
        for (int i = 0; i < p.ngroups; i++) {
            const fc_group *gr = p.groups[i];
            int weight = 0, nred = 0;
            for (int k = 0; k < gr->nnodes; k++) {
                weight += fc_node_weight(gr->nodes[k]);
                nred += fc_op_is_reduce(gr->nodes[k]->op);
            }
            CHECK(weight <= gr->weight); /* the group's weight counts its nodes (and its inlined views) */
            CHECK((int64_t)gr->weight * (gr->nreduce > 1 ? gr->nreduce : 1) <= FC_GROUP_MAX_WEIGHT);
            CHECK_EQ_INT(gr->nreduce, nred);
            if (gr->nnodes > *max_nodes) *max_nodes = gr->nnodes;
        }
        fc_plan_release(&p);
    }
    fc_graph_free(g);
    fc_context_free(ctx);
    return t;
}

/* The shortest of three plans of the same graph: a run that shares its
 * cores with others (ctest -j) is slowed at random, never sped up. */
static double best_plan(shape sh, int n, int *ngroups, int *max_nodes) {
    double best = -1;
    for (int r = 0; r < 3; r++) {
        const double t = plan(sh, n, ngroups, max_nodes);
        if (t < 0) return t;
        if (best < 0 || t < best) best = t;
    }
    return best;
}

/* Doubling n must not quadruple the time (a quadratic pass would); small
 * times are padded so timer noise cannot fail it. */
static void scales(const char *what, shape sh, int n) {
    int g1, g2, m1, m2;
    double t1 = best_plan(sh, n, &g1, &m1), t2 = best_plan(sh, 2 * n, &g2, &m2);
    printf("%s: %d in %.3f s (%d groups), %d in %.3f s (%d groups)\n", what, n, t1, g1, 2 * n, t2, g2);
    CHECK(t1 >= 0 && t2 >= 0);
    CHECK(t2 < 3.0 * t1 + 0.25);
    CHECK(t2 < 60);
    CHECK(g2 >= 2 * n / FC_GROUP_MAX_WEIGHT);
}

int main(void) {
    scales("chain", CHAIN, 20000);
    scales("concat", CONCAT, 2000); /* the memory plan scans the live buffers per buffer: keep it small */

    int ng, mx;
    CHECK(plan(VIEWS, 3000, &ng, &mx) >= 0);
    CHECK(ng >= 3000 / FC_GROUP_MAX_WEIGHT); /* not one kernel of 3000 inlined views */

    double t = plan(REDUCES, 40, &ng, &mx);
    CHECK(t >= 0 && t < 60);

    CHECK(plan(TRANSCENDENTAL, 256, &ng, &mx) >= 0);
    CHECK(mx <= FC_GROUP_MAX_WEIGHT / fc_op_weight(FC_OP_ERF)); /* erf weighs more than an add */
    CHECK(ng >= 2);
    return check_report("test_pass_scale");
}
