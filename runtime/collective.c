/*
 * collective.c - tensor-parallel groups, and the collectives of the host
 * backends: the ranks are threads of one process, so a collective is a
 * barrier, each rank reading every rank's operand, and a second barrier
 * before anyone may reuse its operand. The sums run in float64 in rank
 * order, so the ranks agree bit for bit and a test of TP=2 against TP=1
 * sees only the reassociation of the row-parallel sums.
 *
 * A group's CUDA part (NCCL communicators) is made by the CUDA backend's
 * table (runtime/backend.h, group_new), since this file knows no device.
 */
#include "runtime/collective.h"

#include "runtime/backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct fc_host_group {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    uint64_t generation;
    const void **in; /* by rank: the operand of the collective under way */
};

static void barrier(fc_host_group *h) {
    pthread_mutex_lock(&h->mu);
    uint64_t gen = h->generation;
    if (++h->arrived == h->n) {
        h->arrived = 0;
        h->generation++;
        pthread_cond_broadcast(&h->cv);
    } else
        while (gen == h->generation) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static fc_host_group *host_group_new(int n) {
    fc_host_group *h = calloc(1, sizeof *h);
    if (!h || !(h->in = calloc((size_t)n, sizeof *h->in))) {
        free(h);
        return NULL;
    }
    h->n = n;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    return h;
}

static void host_group_free(fc_host_group *h) {
    if (!h) return;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->in);
    free(h);
}

double fc_host_load(fc_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case FC_F64: return ((const double *)p)[i];
    case FC_F32: return ((const float *)p)[i];
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)p)[i]);
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)p)[i]);
    default: FC_UNREACHABLE("fc_host_load: not a float dtype");
    }
}

void fc_host_store(fc_dtype dt, void *p, int64_t i, double x) {
    switch (dt) {
    case FC_F64: ((double *)p)[i] = x; break;
    case FC_F32: ((float *)p)[i] = (float)x; break;
    case FC_BF16: ((uint16_t *)p)[i] = fc_f32_to_bf16((float)x); break;
    case FC_F16: ((uint16_t *)p)[i] = fc_f32_to_f16((float)x); break;
    default: FC_UNREACHABLE("fc_host_store: not a float dtype");
    }
}

fc_status fc_host_collective(fc_context *ctx, const fc_tp_group *grp, int rank, const fc_node *n, fc_dtype dt,
                             int xrank, const int64_t *xshape, const void *in, void *out) {
    const char *name = fc_op_table[n->op].name;
    int R = (int)n->a.ranks;
    int ax = n->op == FC_OP_ALL_REDUCE ? 0 : (int)(n->a.axis < 0 ? n->a.axis + xrank : n->a.axis);
    int64_t outer = 1, len = xrank > 0 ? xshape[ax] : 1, inner = 1;
    for (int d = 0; d < ax; d++) outer *= xshape[d];
    for (int d = ax + 1; d < xrank; d++) inner *= xshape[d];
    int64_t total = n->op == FC_OP_ALL_GATHER ? outer * len * R * inner
                    : n->op == FC_OP_REDUCE_SCATTER ? outer * (len / R) * inner : outer * len * inner;
    if (!grp || !grp->host) {
        if (R != 1)
            return fc_set_error(ctx, FC_ERR_USAGE,
                                "%s over %d ranks needs a tensor-parallel group (fc_compile_options.tp)", name, R);
        if (out != in) memcpy(out, in, (size_t)total * fc_dtype_size(dt));
        return FC_OK;
    }
    if (R != grp->degree || rank < 0 || rank >= R)
        return fc_set_error(ctx, FC_ERR_USAGE, "%s over %d ranks run as rank %d of a group of %d", name, R, rank,
                            grp->degree);
    fc_host_group *h = grp->host;
    double *tmp = malloc(sizeof(double) * (size_t)(total > 0 ? total : 1));
    /* A rank out of memory still takes part in both barriers (the others
     * would wait for it for ever), and reports its error after them. */
    h->in[rank] = in;
    barrier(h);
    if (tmp) {
        if (n->op == FC_OP_ALL_REDUCE)
            for (int64_t i = 0; i < total; i++) {
                double s = 0;
                for (int r = 0; r < R; r++) s += fc_host_load(dt, h->in[r], i);
                tmp[i] = s;
            }
        else if (n->op == FC_OP_ALL_GATHER) {
            for (int64_t o = 0; o < outer; o++)
                for (int r = 0; r < R; r++)
                    for (int64_t j = 0; j < len * inner; j++)
                        tmp[(o * R + r) * len * inner + j] = fc_host_load(dt, h->in[r], o * len * inner + j);
        } else {
            FC_ASSERT(n->op == FC_OP_REDUCE_SCATTER);
            int64_t part = len / R;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t j = 0; j < part * inner; j++) {
                    double s = 0;
                    for (int r = 0; r < R; r++)
                        s += fc_host_load(dt, h->in[r], (o * len + rank * part) * inner + j);
                    tmp[o * part * inner + j] = s;
                }
        }
    }
    barrier(h);
    if (!tmp) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (%s)", name);
    for (int64_t i = 0; i < total; i++) fc_host_store(dt, out, i, tmp[i]);
    free(tmp);
    return FC_OK;
}

/* ---- fusec.h: the group ---------------------------------------------------- */

fc_status fc_tp_group_create(fc_context *ctx, fc_device device, int degree, fc_tp_group **out) {
    if (!out) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_tp_group_create: out is NULL") : FC_ERR_USAGE;
    *out = NULL;
    if (!ctx) return FC_ERR_USAGE;
    if (degree < 1 || degree > 1024)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_tp_group_create: degree must be 1 .. 1024, got %d", degree);
    const fc_backend *b = fc_backend_for(device);
    if (!b) return fc_set_error(ctx, FC_ERR_USAGE, "fc_tp_group_create: bad device %d", (int)device);
    fc_tp_group *grp = calloc(1, sizeof *grp);
    if (!grp) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    grp->device = device;
    grp->degree = degree;
    fc_status st = FC_OK;
    if (device == FC_DEVICE_CPU || device == FC_DEVICE_REF) {
        if (!(grp->host = host_group_new(degree))) st = fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    } else if (!b->group_new)
        st = fc_set_error(ctx, FC_ERR_UNSUPPORTED, "fc_tp_group_create: the %s backend has no collectives", b->name);
    else if ((st = b->group_new(ctx, degree, &grp->dev)) == FC_OK)
        grp->dev_free = b->group_free;
    if (st != FC_OK) {
        fc_tp_group_free(grp);
        return st;
    }
    *out = grp;
    return FC_OK;
}

int fc_tp_group_degree(const fc_tp_group *grp) { return grp ? grp->degree : 0; }

void fc_tp_group_free(fc_tp_group *grp) {
    if (!grp) return;
    host_group_free(grp->host);
    if (grp->dev && grp->dev_free) grp->dev_free(grp->dev);
    free(grp);
}

fc_status fc_tp_check_options(fc_context *ctx, const fc_compile_options *o, fc_device d) {
    if (!o->tp)
        return o->tp_rank == 0 ? FC_OK
                               : fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: tp_rank %d without a group (tp)",
                                              o->tp_rank);
    if (o->tp->device != d)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: the tensor-parallel group is of another device");
    if (o->tp_rank < 0 || o->tp_rank >= o->tp->degree)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: tp_rank %d is not a rank of a group of %d", o->tp_rank,
                            o->tp->degree);
    return FC_OK;
}

fc_status fc_tensor_shard(fc_context *ctx, const fc_tensor *full, int axis, int degree, int rank, fc_tensor *out) {
    if (!ctx) return FC_ERR_USAGE;
    if (!full || !out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_tensor_shard: NULL tensor");
    memset(out, 0, sizeof *out);
    int64_t n = fc_tensor_numel(full);
    if ((unsigned)full->dtype >= FC_DTYPE_COUNT || n < 0 || (n > 0 && !full->data))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_tensor_shard: a bad tensor");
    if (degree < 1 || rank < 0 || rank >= degree)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_tensor_shard: rank %d is not one of %d", rank, degree);
    if (axis < -1 || axis >= full->rank)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_tensor_shard: axis %d is out of range for rank %d", axis,
                            full->rank);
    if (axis >= 0 && full->shape[axis] % degree != 0)
        return fc_set_error(ctx, FC_ERR_INPUT, "fc_tensor_shard: dim %d (%lld) is not a multiple of %d", axis,
                            (long long)full->shape[axis], degree);
    *out = *full;
    int64_t outer = 1, len = 1, inner = 1;
    if (axis >= 0) {
        for (int d = 0; d < axis; d++) outer *= full->shape[d];
        for (int d = axis + 1; d < full->rank; d++) inner *= full->shape[d];
        out->shape[axis] = full->shape[axis] / degree;
        len = out->shape[axis];
    } else
        inner = n;
    size_t es = fc_dtype_size(full->dtype), row = (size_t)(len * inner) * es;
    /* malloc: fc_tensor_release frees it */
    out->data = malloc(row * (size_t)outer + 1);
    if (!out->data) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out->data + (size_t)o * row,
               (const char *)full->data + (size_t)(axis >= 0 ? o * degree + rank : o) * row, row);
    return FC_OK;
}

fc_status fc_weights_shard(const fc_weights *w, const fc_graph *sharded, int degree, int rank, fc_weights **out) {
    if (!out) return FC_ERR_USAGE;
    *out = NULL;
    if (!w || !sharded) return FC_ERR_USAGE;
    fc_context *ctx = fc_graph_context(sharded);
    fc_weights *o = fc_weights_new();
    if (!o) return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "fc_weights_shard: no weight sets in this build, or out of memory");
    fc_status st = FC_OK;
    for (int i = 0; i < fc_weights_count(w) && st == FC_OK; i++) {
        const char *name = fc_weights_name(w, i);
        int axis = -1;
        for (int k = 0; k < fc_graph_num_params(sharded); k++)
            if (!strcmp(fc_value_name(fc_graph_param(sharded, k)), name)) axis = fc_graph_param_shard_axis(sharded, k);
        if (axis < 0) {
            st = fc_weights_add(o, name, fc_weights_tensor(w, i));
            continue;
        }
        fc_tensor part;
        st = fc_tensor_shard(ctx, fc_weights_tensor(w, i), axis, degree, rank, &part);
        if (st == FC_OK) {
            st = fc_weights_add(o, name, &part); /* a copy: weight sets own or map their tensors */
            fc_tensor_release(&part);
        }
    }
    if (st != FC_OK) {
        fc_weights_free(o);
        return st == FC_ERR_NOMEM ? fc_set_error(ctx, st, "out of memory") : st;
    }
    *out = o;
    return FC_OK;
}
