/* codegen.c - the dispatcher: CUDA C for each kernel group of a plan
 * (fc_cuda_codegen), one translation unit for the whole plan.
 *
 * Each group goes to its generator: a GEMM to the path gemm_choice.c
 * picks, attention to attention.c, pointwise and row groups to
 * pointwise.c and reduce.c (kernel.h); a dynamic plan of kernels only
 * gives every kernel a frame entry (frame_entry.c).
 */
#include "kernel.h"
#include "attention.h"
#include "skinny.h"
#include "gemv.h"
#include "gemm.h"
#include "gemm_choice.h"
#include "decode.h"
#include "passes/epilogue.h" /* fc_gemm_describe */
#include "lower/conv_desc.h" /* fc_conv_describe */
#include "lower/launch_cost.h"
#include "ir/switches.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char prelude[] =
#include "prelude.cuh.inc.str"
    ;

const char *fc_cuda_source_switches(void) {
    enum { MAX = 256 };
    char opt[MAX];
    const int at = snprintf(opt, sizeof opt, "-DFC_SWITCHES=");
    if (!fc_switch_source_marker(opt + at, sizeof opt - (size_t)at)) return NULL;
    /* Interned: a program keeps pointers to its options. A process sees a
     * few settings at most; past the table, one shared marker still keeps
     * every switched program apart from the default ones. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char seen[16][MAX];
    static int nseen;
    const char *r = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nseen && !r; i++)
        if (!strcmp(seen[i], opt)) r = seen[i];
    if (!r && nseen < 16) {
        memcpy(seen[nseen], opt, sizeof opt);
        r = seen[nseen++];
    }
    pthread_mutex_unlock(&mu);
    return r ? r : "-DFC_SWITCHES=many";
}

static void summarize(const fc_group *gr, char *out, size_t n) {
    size_t pos = (size_t)snprintf(out, n, "%s:", gr->kind == FC_GROUP_REDUCE      ? "reduce"
                                                 : gr->kind == FC_GROUP_LIBRARY   ? "library"
                                                 : gr->kind == FC_GROUP_ATTENTION ? "attention"
                                                                                  : "pointwise");
    for (int i = 0; i < gr->nnodes && pos + 16 < n; i++)
        pos += (size_t)snprintf(out + pos, n - pos, "%s%s", i ? "," : " ", fc_op_table[gr->nodes[i]->op].name);
}

/* What the dispatcher carries from group to group of one unit. */
typedef struct unit {
    const fc_plan *plan;
    fc_strbuf s;    /* where the generator at work writes: the unit, or one kernel's text (own_kernel) */
    fc_strbuf head; /* what the unit and every kernel's own source start with: the prelude, the frame's */
    char **canon;   /* per distinct kernel: its text with its name as KEY_NAME (share_kernel) */
    uint64_t *hash; /* per distinct kernel: the hash of canon */
    fc_cuda_src *out;
    fc_gemm_choice *choice; /* per group (fc_cuda_gemm_choose) */
    bool frame;             /* the plan's kernels take the frame (frame_plan) */
    bool carry;             /* the first kernel carries it */
    bool gemm_templates;    /* gemm.c's, emitted before the first generated GEMM */
    unsigned skinny_templates; /* skinny.c's, before the first skinny GEMM */
} unit;

/* Whether a dynamic plan's kernels take the frame: every launch of it is
 * a kernel (a library call takes its sizes from the host at each shape;
 * an attention group of a dynamic plan fails below). */
static bool frame_plan(const unit *u) {
    const fc_plan *plan = u->plan;
    if (!plan->dynamic) return false;
    for (int i = 0; i < plan->ngroups; i++) {
        const fc_group *gr = plan->groups[i];
        if (gr->batch > 0) continue;
        if (gr->kind == FC_GROUP_ATTENTION || (gr->kind == FC_GROUP_LIBRARY && u->choice[i].path != FC_GEMM_GENERATED)) return false;
    }
    return true;
}

/* The frame entry of kernel launch l just emitted, in a frame plan. */
static void frame_entry(unit *u, fc_launch *l) {
    if (u->frame) fc_cg_frame_entry(&u->s, l, u->plan->g->nsyms, fc_cg_carrier_words(u->out, u->carry));
}

/* A library group: the GEMM path its choice names (gemm_choice.c). */
static fc_status gemm_group(unit *u, int gi, fc_launch *l) {
    const fc_plan *plan = u->plan;
    const fc_group *gr = plan->groups[gi];
    const fc_gemm_choice *c = &u->choice[gi];
    fc_graph *g = plan->g;
    fc_status st = FC_OK;
    switch (c->path) {
    case FC_GEMM_UNSUPPORTED:
        return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED,
                            "codegen: group %d (%s): %s with symbolic shapes has no library call or kernel (bind the symbols)",
                            gr->id, l->summary, fc_op_table[gr->nodes[0]->op].name);
    case FC_GEMM_GENERATED: /* gemm.c */
        snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
        if (gr->nodes[0]->op == FC_OP_GEMM) fc_gemm_describe(gr->nodes[0], l->summary, sizeof l->summary);
        l->frame = u->frame;
        st = fc_cuda_emit_gemm(plan, gr, l->name, &u->s, &u->gemm_templates, l);
        if (!st) frame_entry(u, l);
        return st;
    case FC_GEMM_SKINNY_ATTENTION: /* skinny.c */
        snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
        st = fc_cuda_emit_skinny_attention(plan->groups[c->attention], gr, &c->fused, l->name, &u->s, &u->skinny_templates, l);
        if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (codegen)");
        return st;
    case FC_GEMM_SKINNY: /* skinny.c */
        snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
        return fc_cuda_emit_skinny(gr, &c->skinny, l->name, &u->s, &u->skinny_templates, l);
    case FC_GEMM_GEMV: /* gemv.c */
        snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
        st = fc_cuda_emit_gemv(plan, gr, &c->gemv, l->name, &u->s, l);
        if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (codegen)");
        return st;
    default: /* FC_GEMM_LIBRARY */
        l->kind = FC_LAUNCH_LIBRARY;
        snprintf(l->name, sizeof l->name, "%s", fc_op_table[gr->nodes[0]->op].name);
        if (gr->nodes[0]->op == FC_OP_GEMM) fc_gemm_describe(gr->nodes[0], l->summary, sizeof l->summary);
        if (gr->nodes[0]->op == FC_OP_CONV_CL) fc_conv_describe(gr->nodes[0], l->summary, sizeof l->summary);
        return FC_OK;
    }
}

/* An attention group: its kernel (attention.c). */
static fc_status attention_group(unit *u, const fc_group *gr, fc_launch *l) {
    fc_graph *g = u->plan->g;
    if (u->plan->dynamic) {
        /* fc_pipeline lowers attention ops in dynamic plans; one that
         * stays (a symbolic head dim with the default scale) has no
         * kernel: the flash-attention template needs static shapes. */
        return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED,
                            "codegen: group %d (%s): attention with symbolic shapes has no dynamic kernel (bind the symbols)",
                            gr->id, l->summary);
    }
    snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
    char *src = NULL;
    fc_status st = fc_cuda_emit_attention(u->plan, gr, l->name, &src, l);
    if (!st) fc_strbuf_printf(&u->s, "%s", src);
    free(src);
    return st;
}

/* A pointwise or row group: its kernel (pointwise.c, reduce.c). */
static fc_status kernel_group(unit *u, const fc_group *gr, fc_launch *l) {
    const fc_plan *plan = u->plan;
    fc_graph *g = plan->g;
    l->kind = FC_LAUNCH_KERNEL;
    snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
    l->nsyms = plan->dynamic ? g->nsyms : 0;
    l->frame = u->frame;
    kctx k = {.p = plan, .gr = gr, .s = &u->s, .reduce = gr->kind == FC_GROUP_REDUCE, .dyn = plan->dynamic, .nsyms = g->nsyms,
              .frame = u->frame, .store_only_vid = -1};
    k.is_row = calloc((size_t)g->next_value_id + 1, sizeof(bool));
    k.row_ready = calloc((size_t)g->next_value_id + 1, sizeof(bool));
    fc_status st;
    if (!k.is_row || !k.row_ready) st = FC_ERR_NOMEM;
    else {
        st = gr->kind == FC_GROUP_REDUCE ? fc_cg_reduce_kernel(&k, l) : fc_cg_pointwise_kernel(&k, l);
    }
    if (!st && k.oom) st = FC_ERR_NOMEM;
    if (!st && k.err) st = fc_set_error(g->ctx, k.err, "%s (group %d: %s)", k.errmsg, gr->id, l->summary);
    if (!st) frame_entry(u, l);
    if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (codegen)");
    free(k.memo);
    free(k.cm);
    free(k.is_row);
    free(k.row_ready);
    return st;
}

/* A launch for group gr: its arguments (inputs, then outputs) and summary. */
static fc_status open_launch(const fc_group *gr, fc_launch *l, fc_graph *g) {
    l->group = gr->id;
    l->loadtime = gr->loadtime;
    summarize(gr, l->summary, sizeof l->summary);
    l->nargs = gr->ninputs + gr->noutputs;
    l->nreads = gr->ninputs;
    l->args = calloc((size_t)l->nargs + 1, sizeof(int));
    if (!l->args) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    for (int i = 0; i < gr->ninputs; i++) l->args[i] = gr->inputs[i]->id;
    for (int i = 0; i < gr->noutputs; i++) l->args[gr->ninputs + i] = gr->outputs[i]->id;
    return FC_OK;
}

/* A collective: a library call that the runtime makes through NCCL
 * (runtime/cuda/nccl.c), named "<op>.<dtype>" so that the launch list
 * says all it needs. NCCL gathers and scatters along the outermost axis;
 * over one rank the layout is the same whatever the axis. */
static fc_status collective_group(unit *u, const fc_group *gr, fc_launch *l) {
    const fc_node *n = gr->nodes[0];
    const fc_value *x = n->in[0];
    int64_t outer = 1;
    for (int d = 0; n->op != FC_OP_ALL_REDUCE && d < (n->a.axis < 0 ? n->a.axis + x->rank : n->a.axis); d++)
        outer *= x->dims[d];
    if (outer != 1 && n->a.ranks > 1)
        return fc_set_error(u->plan->g->ctx, FC_ERR_UNSUPPORTED,
                            "codegen: group %d: %s along an inner axis (%lld rows before it) over %lld ranks: NCCL "
                            "gathers along the outermost axis only",
                            gr->id, fc_op_table[n->op].name, (long long)outer, (long long)n->a.ranks);
    if (x->dtype != FC_F32 && x->dtype != FC_BF16 && x->dtype != FC_F16 && x->dtype != FC_F64)
        return fc_set_error(u->plan->g->ctx, FC_ERR_UNSUPPORTED, "codegen: group %d: %s of %s", gr->id,
                            fc_op_table[n->op].name, fc_dtype_name(x->dtype));
    l->kind = FC_LAUNCH_LIBRARY;
    snprintf(l->name, sizeof l->name, "%s.%s", fc_op_table[n->op].name, fc_dtype_name(x->dtype));
    return FC_OK;
}

/* What a launch runs, written to u->s: a batch from gi to end, or group
 * gi's kernel, library call or alias. */
static fc_status emit_launch(unit *u, int gi, int end, fc_launch *l) {
    const fc_plan *plan = u->plan;
    const fc_group *gr = plan->groups[gi];
    if (gr->batch > 0) {
        l->frame = u->frame;
        fc_status st = fc_cg_batched_launch(plan, gi, end, &u->s, l);
        if (!st) frame_entry(u, l);
        return st;
    }
    if (u->choice[gi].path != FC_GEMM_NONE) return gemm_group(u, gi, l);
    if (gr->kind == FC_GROUP_ATTENTION) return attention_group(u, gr, l);
    if (fc_cuda_is_decode_group(gr)) { /* update_slice, cache_attention (decode.c) */
        snprintf(l->name, sizeof l->name, "fc_%s_k%d", plan->g->name, gr->id);
        return fc_cuda_emit_decode(plan, gr, l->name, &u->s, l);
    }
    if (gr->kind == FC_GROUP_LIBRARY && fc_op_is_collective(gr->nodes[0]->op)) return collective_group(u, gr, l);
    if (gr->kind == FC_GROUP_ALIAS) { /* a view of a stored buffer: nothing to run */
        l->kind = FC_LAUNCH_ALIAS;
        snprintf(l->name, sizeof l->name, "alias");
        return FC_OK;
    }
    return kernel_group(u, gr, l);
}

/* ------------------------------------------------------------------ */
/* One kernel per distinct computation.                                */
/* ------------------------------------------------------------------ */

/*
 * Layer k of a model is layer 0's computation on other buffers: the same
 * kernel text but for its name (buffers are parameters; nothing of a
 * value's id, name or arena offset is in a static kernel's text). So each
 * kernel is generated alone, its text with its name replaced by KEY_NAME
 * is its structural key, and a launch whose key was seen before launches
 * that kernel with its own arguments. A kernel's name comes from its key
 * too ("fc_reduce_1f2e3d4c5b6a"), not from the graph or the group, so that
 * another program with the same kernel compiles the same source and meets
 * its cubin in the cache. Which ops each launch covers stays in its
 * summary and group (the plan's lines).
 */
#define KEY_NAME "fc__KERNEL__"

/* text with every `from` replaced by `to`; NULL: out of memory. */
static char *replace_all(const char *text, const char *from, const char *to) {
    const size_t nf = strlen(from), nt = strlen(to);
    size_t count = 0;
    for (const char *p = strstr(text, from); p; p = strstr(p + nf, from)) count++;
    const size_t n = strlen(text) + count * nt - count * nf;
    char *r = malloc(n + 1), *w = r;
    if (!r) return NULL;
    for (const char *p = text, *q; (q = strstr(p, from)); p = q + nf) {
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        memcpy(w, to, nt);
        w += nt;
        text = q + nf;
    }
    strcpy(w, text);
    return r;
}

/* FNV-1a, 64 bits: names and a first test; equality is strcmp. */
static uint64_t text_hash(const char *t) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *t; t++) h = (h ^ (unsigned char)*t) * 0x100000001b3ull;
    return h;
}

/* The kind a kernel's name starts with, from the path that made it. */
static const char *kernel_kind(const unit *u, int gi) {
    const fc_group *gr = u->plan->groups[gi];
    if (gr->batch > 0) return "batch";
    switch (u->choice[gi].path) {
    case FC_GEMM_GENERATED: return "gemm";
    case FC_GEMM_SKINNY: return "skinny";
    case FC_GEMM_GEMV: return "gemv";
    case FC_GEMM_SKINNY_ATTENTION: return "skinny_attention";
    default: break;
    }
    if (fc_cuda_is_decode_group(gr)) return fc_op_table[gr->nodes[0]->op].name;
    return gr->kind == FC_GROUP_ATTENTION ? "attention" : gr->kind == FC_GROUP_REDUCE ? "reduce" : "pointwise";
}

/* Launch l's kernel, just generated alone as `text` (with the templates
 * it needs: fresh_gemm, fresh_skinny), becomes a launch of an earlier
 * kernel with the same key, or a new distinct kernel: its own source, and
 * its text in the unit (once; what the unit has of the templates is not
 * written again, so the kernel is generated again without them). The
 * unit's template flags are u's on entry. */
static fc_status share_kernel(unit *u, int gi, int end, fc_launch *l, char *text, bool fresh_gemm, unsigned fresh_skinny) {
    fc_graph *g = u->plan->g;
    const fc_group *gr = u->plan->groups[gi];
    const bool comment = gr->batch == 0 && (u->choice[gi].path == FC_GEMM_NONE || u->choice[gi].path == FC_GEMM_GEMV);
    fc_cuda_src *out = u->out;
    if (!text) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    char *canon = replace_all(text, l->name, KEY_NAME);
    free(text);
    if (!canon) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    const uint64_t h = text_hash(canon);
    for (int k = 0; k < out->nkernels; k++)
        if (u->hash[k] == h && !strcmp(u->canon[k], canon)) {
            free(canon);
            snprintf(l->name, sizeof l->name, "%s", out->kernels[k].name);
            fc_strbuf_printf(&u->s, "// group %d: %s: launches %s\n", gr->id, l->summary, l->name);
            return FC_OK;
        }
    fc_cuda_kernel *kn = &out->kernels[out->nkernels];
    snprintf(kn->name, sizeof kn->name, "fc_%s_%012llx", kernel_kind(u, gi), (unsigned long long)(h >> 16));
    for (int k = 0; k < out->nkernels; k++) /* two keys, one name: 48 bits of the hash collide */
        if (!strcmp(out->kernels[k].name, kn->name)) {
            snprintf(kn->name, sizeof kn->name, "fc_%s_%012llx_%d", kernel_kind(u, gi), (unsigned long long)(h >> 16), out->nkernels & 0xffff);
            break;
        }
    snprintf(l->name, sizeof l->name, "%s", kn->name);
    u->canon[out->nkernels] = canon;
    u->hash[out->nkernels] = h;
    out->nkernels++;
    char *named = replace_all(canon, KEY_NAME, kn->name);
    fc_strbuf own = {0};
    if (named) fc_strbuf_printf(&own, "// generated by fusec %s: kernel %s\n%s%s", FUSEC_VERSION_STRING, kn->name, u->head.buf, named);
    kn->source = own.buf;
    if (!named || own.oom) {
        free(named);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    }
    if (comment) fc_strbuf_printf(&u->s, "// group %d: %s\n", gr->id, l->summary);
    if ((fresh_gemm && u->gemm_templates) || (fresh_skinny & u->skinny_templates)) {
        /* Again, into the unit, after the templates it has. */
        free(named);
        named = NULL;
        fc_strbuf unit_s = u->s;
        u->s = (fc_strbuf){0};
        char keep[sizeof l->name];
        snprintf(keep, sizeof keep, "%s", l->name);
        fc_status st = emit_launch(u, gi, end, l); /* it names l as the first time */
        fc_strbuf again = u->s;
        u->s = unit_s;
        if (!st && !again.oom && again.buf) named = replace_all(again.buf, l->name, keep);
        snprintf(l->name, sizeof l->name, "%s", keep);
        free(again.buf);
        if (st) return st;
        if (!named) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    }
    fc_strbuf_printf(&u->s, "%s", named);
    free(named);
    u->gemm_templates |= fresh_gemm;
    u->skinny_templates |= fresh_skinny;
    return FC_OK;
}

/* Generate what launch l runs alone (fresh template flags), then share it
 * (share_kernel) when it is a kernel. */
static fc_status own_kernel(unit *u, int gi, int end, fc_launch *l) {
    fc_strbuf unit_s = u->s;
    const bool unit_gemm = u->gemm_templates;
    const unsigned unit_skinny = u->skinny_templates;
    u->s = (fc_strbuf){0};
    u->gemm_templates = false;
    u->skinny_templates = 0;
    fc_status st = emit_launch(u, gi, end, l);
    fc_strbuf text = u->s;
    const bool fresh_gemm = u->gemm_templates;
    const unsigned fresh_skinny = u->skinny_templates;
    u->s = unit_s;
    u->gemm_templates = unit_gemm;
    u->skinny_templates = unit_skinny;
    if (!st && text.oom) st = fc_set_error(u->plan->g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    if (st || l->kind != FC_LAUNCH_KERNEL) {
        if (!st && text.buf) fc_strbuf_printf(&u->s, "%s", text.buf);
        free(text.buf);
        return st;
    }
    return share_kernel(u, gi, end, l, text.buf ? text.buf : calloc(1, 1), fresh_gemm, fresh_skinny);
}

/* The launches of groups from gi on (a batch takes several); *next: the
 * group after them. */
static fc_status group_launch(unit *u, int gi, int *next) {
    const fc_plan *plan = u->plan;
    const fc_group *gr = plan->groups[gi];
    *next = gi + 1;
    if (gr->batch > 0) {
        int end = gi;
        while (end + 1 < plan->ngroups && plan->groups[end + 1]->batch == gr->batch) end++;
        *next = end + 1;
        fc_launch *l = &u->out->launches[u->out->nlaunches++];
        fc_launch_note(l, plan, gi, end, -1);
        return own_kernel(u, gi, end, l);
    }
    /* An attention that runs inside the skinny GEMM reading its result
     * (skinny.c, "attention and projection") gets no launch of its own. */
    for (int j = gi + 1; j < plan->ngroups; j++)
        if (u->choice[j].path == FC_GEMM_SKINNY_ATTENTION && u->choice[j].attention == gi) return FC_OK;
    /* So does a cache update inside the attention reading it (decode.c). */
    if (fc_cuda_update_in_attention(plan, gi)) return FC_OK;
    /* And a pad a GEMV or a skinny GEMM reads or writes around (gemv.c, skinny.c). */
    if (fc_cuda_pad_absorbed(plan, u->choice, gi)) return FC_OK;
    fc_launch *l = &u->out->launches[u->out->nlaunches++];
    fc_status st = open_launch(gr, l, plan->g);
    fc_launch_note(l, plan, gi, gi, u->choice[gi].path == FC_GEMM_SKINNY_ATTENTION ? u->choice[gi].attention : -1);
    return st ? st : own_kernel(u, gi, gi, l);
}

fc_status fc_cuda_codegen(const fc_plan *plan, fc_cuda_src *out) {
    memset(out, 0, sizeof *out);
    fc_graph *g = plan->g;
    unit u = {.plan = plan, .out = out};
    fc_strbuf_printf(&u.head, "%s\n", prelude);
    out->launches = calloc((size_t)plan->ngroups + 1, sizeof *out->launches);
    out->kernels = calloc((size_t)plan->ngroups + 1, sizeof *out->kernels);
    u.choice = calloc((size_t)plan->ngroups + 1, sizeof *u.choice);
    u.canon = calloc((size_t)plan->ngroups + 1, sizeof *u.canon);
    u.hash = calloc((size_t)plan->ngroups + 1, sizeof *u.hash);
    fc_status st = FC_OK;
    if (!out->launches || !out->kernels || !u.choice || !u.canon || !u.hash) {
        st = fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
        goto done;
    }
    for (int i = 0; i < plan->ngroups; i++) fc_cuda_gemm_choose(plan, i, &u.choice[i]);
    u.frame = frame_plan(&u);
    if (u.frame) {
        out->frame_words = g->nsyms + g->next_value_id;
        u.carry = fc_cg_frame_carry(out->frame_words);
        fc_cg_frame_preludes(&u.head, u.carry);
    }
    fc_strbuf_printf(&u.s, "// generated by fusec %s for graph %s\n%s", FUSEC_VERSION_STRING, g->name, u.head.buf ? u.head.buf : "");
    if (plan->dynamic && g->nsyms > FC_DYN_MAX_SYMS)
        st = fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "codegen: graph %s has %d symbols; a dynamic program takes at most %d", g->name,
                          g->nsyms, FC_DYN_MAX_SYMS);
    for (int i = 0; i <= plan->ngroups; i++)
        for (int a = 0; a < 3; a++) {
            out->launches[i].grid_work[a] = fc_mono_one();
            out->launches[i].grid_per[a] = 1;
            out->launches[i].grid_max[a] = 1;
        }
    if (!st && u.head.oom) st = fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    for (int gi = 0; gi < plan->ngroups && !st;) st = group_launch(&u, gi, &gi);
    /* The kernel after the carrier reads the frame before it waits: it
     * starts when the carrier has ended (a plain edge), never during. */
    const int carrier = fc_cuda_src_frame_carrier(out);
    for (int i = carrier + 1; carrier >= 0 && i < out->nlaunches; i++)
        if (out->launches[i].kind == FC_LAUNCH_KERNEL) {
            out->launches[i].pdl = false;
            break;
        }
    if (!st && u.s.oom) st = fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
done:
    for (int k = 0; u.canon && k < out->nkernels; k++) free(u.canon[k]);
    free(u.canon);
    free(u.hash);
    free(u.choice);
    free(u.head.buf);
    if (st) {
        free(u.s.buf);
        fc_cuda_src_release(out);
        return st;
    }
    out->source = u.s.buf;
    return FC_OK;
}

