/* program_variant.c - the shapes (instances) of a dynamic program's variant, made from the variant's lowered description, and the arena they share and grow (docs/DYNAMIC.md). The variant's compile is variant_compile.c. */
#include "runtime/cuda/program_impl.h"

static size_t round_up16(size_t n) { return (n + 15) & ~(size_t)15; }

/*
 * The instance of variant vp at syms: one allocation that holds the
 * program, its symbol values and its description, which the variant's
 * lowered description gives at these values (fc_variant_desc_at: the
 * arena's placement, a size per distinct value shape, three grid formulas
 * per kernel whose grid is per shape, each GEMM's plan). No graph is
 * bound, nothing is planned again and no code is generated; the result is
 * what binding the graph (fc_plan_bind, then the compile's description)
 * makes, value by value (tests/test_dynamic.c checks it).
 */
fc_status fc_program_instance(fc_program *vp, const int64_t *syms, int nsyms, fc_program **out) {
    *out = NULL;
    fc_prog_variant *vr = fc_prog_variant_of(vp);
    if (!vr) return fc_set_error(fc_program_context(vp), FC_ERR_USAGE, "fc_program_instance: not a variant");
    const fc_program *v = &vr->x;
    fc_status st = fc_graph_check_bind_values(v->g, syms, nsyms);
    if (st != FC_OK) return st;
    const size_t at_syms = round_up16(sizeof(fc_prog_instance)),
                 at_desc = at_syms + round_up16(sizeof(int64_t) * (size_t)(nsyms + 1));
    char *block = fc_ctx_malloc(v->ctx, at_desc + fc_variant_desc_bytes(&vr->lowered, &v->d));
    if (!block) return fc_set_error(v->ctx, FC_ERR_NOMEM, "out of memory (a shape of program %s)", v->d.graph_name);
    fc_prog_instance *in = (fc_prog_instance *)(void *)block;
    memset(in, 0, sizeof *in);
    fc_program *p = &in->x;
    p->tag.head.backend = &fc_backend_cuda;
    p->tag.kind = FC_PROG_INSTANCE;
    p->ctx = v->ctx;
    p->opts = v->opts;
    in->variant = vr;
    in->syms = (int64_t *)(void *)(block + at_syms);
    memcpy(in->syms, syms, sizeof *syms * (size_t)nsyms);
    in->nsyms = nsyms;
    st = fc_variant_desc_at(v->ctx, &vr->lowered, &v->d, in->syms, nsyms, block + at_desc, &p->d);
    if (st != FC_OK) {
        if (st == FC_ERR_NOMEM) fc_set_error(p->ctx, st, "out of memory (a shape of program %s)", v->d.graph_name);
        fc_program_free(p);
        return st;
    }
    fc_prog_count_launch_args(p);
    *out = p;
    return FC_OK;
}

fc_status fc_program_prepare(fc_program *p) {
    fc_status st = fc_prog_prepare_run(p);
    /* And every GEMM's algorithm, so the first run asks cuBLASLt nothing. */
    const double t = fc_now_ms();
    for (int i = 0; i < p->d.src.nlaunches && st == FC_OK && p->blas; i++)
        if (fc_program_gemm(&p->d, i)) st = fc_cublaslt_warm(p->blas, p->ctx, &p->d.gemm[i], FC_CUBLASLT_WORKSPACE_BYTES);
    if (p->blas) spec_step(p, "GEMM algorithms", t);
    /* (The convolutions' cuDNN plans are made with their handle.) */
    return st;
}

fc_status fc_program_set_signature(fc_program *p, fc_graph *g) {
    fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    fc_status st = fc_program_desc_signature(dp->ctx, g, &dp->d);
    if (st == FC_OK && !(dp->d.graph_text = fc_print(g))) st = FC_ERR_NOMEM;
    fc_prog_set_target(&dp->d, &dp->opts);
    return st;
}

void fc_program_set_dynamic(fc_program *p, struct fc_dynamic *dyn) { fc_prog_dyn_of(p)->dyn = dyn; }
struct fc_dynamic *fc_program_dynamic(const fc_program *p) {
    fc_prog_dynamic *dp = p && fc_program_is(p, FC_DEVICE_CUDA) ? fc_prog_dyn_of(p) : NULL;
    return dp ? dp->dyn : NULL;
}
fc_run_stats *fc_program_stats_ref(fc_program *p) {
    fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    return dp ? &dp->stats : &p->stats;
}
struct fc_cublaslt *fc_program_blas(const fc_program *p) {
    const fc_program *x = fc_prog_exec_of(p);
    return x ? x->blas : NULL;
}

const struct fc_cuda_device *fc_program_device(const fc_program *p) {
    const fc_program *x = fc_prog_exec_of(p);
    return x ? x->dev : NULL;
}

fc_program *fc_program_new_shell(fc_context *ctx, const fc_compile_options *o) {
    fc_prog_dynamic *dp = fc_ctx_malloc(ctx, sizeof *dp);
    if (!dp) return NULL;
    memset(dp, 0, sizeof *dp);
    dp->tag.head.backend = &fc_backend_cuda;
    dp->tag.kind = FC_PROG_DYNAMIC;
    dp->ctx = ctx;
    dp->opts = *o;
    return (fc_program *)(void *)dp;
}

/* The variants' arena growths are serialized process-wide: the caller's
 * thread grows an arena for the shape it runs now (ensure_instance), a
 * dynamic program's background thread grows it ahead of need
 * (fc_program_arena_ahead). Growths are rare; one lock serves all. A
 * variant's shared_arena_bytes is written under it and read without it
 * (atomically) on every run. */
pthread_mutex_t fc_prog_arena_lock = PTHREAD_MUTEX_INITIALIZER;

/* Make v's arena (a variant's) hold `bytes`: doubled at least (a sweep of
 * growing shapes grows it a few times), or exactly (fc_program_reserve's
 * declared largest shape). Under fc_prog_arena_lock. */
fc_status fc_prog_grow_arena(fc_prog_variant *vr, int64_t bytes, bool exact) {
    fc_program *v = &vr->x;
    if (bytes <= vr->shared_arena_bytes) return FC_OK; /* grown ahead meanwhile */
    int64_t grown = !exact && vr->shared_arena_bytes * 2 > bytes ? vr->shared_arena_bytes * 2 : bytes;
    const double t0 = fc_now_ms();
    fc_status st = vr->arena_moves ? FC_ERR_UNSUPPORTED : fc_cuda_region_grow(v->dev, &v->arena_region, (size_t)grown);
    if (st == FC_OK) {
        if (v->arena != v->arena_region.base) vr->arena_gen++; /* its first growth */
        v->arena = v->arena_region.base;
        grown = (int64_t)v->arena_region.mapped;
    } else if (st == FC_ERR_UNSUPPORTED) {
        vr->arena_moves = true;
        if (v->arena) {
            /* cuMemFree waits for the work that may still use it. */
            (void)fc_cuda_free(v->dev, v->arena);
            v->arena = 0;
            __atomic_store_n(&vr->shared_arena_bytes, 0, __ATOMIC_RELEASE);
        }
        st = fc_cuda_alloc(v->dev, (size_t)grown, &v->arena);
        if (st != FC_OK) return st;
        vr->arena_gen++;
    } else {
        return st;
    }
    __atomic_store_n(&vr->shared_arena_bytes, grown, __ATOMIC_RELEASE);
    v->stats.arena_grows++;
    v->stats.arena_grow_ms += fc_now_ms() - t0;
    return FC_OK;
}

int64_t fc_program_arena_ahead_bytes(fc_program *inst) {
    const fc_prog_instance *in = fc_prog_instance_of(inst);
    fc_prog_variant *vr = in ? in->variant : NULL;
    if (!vr || !vr->x.arena_region.base) return 0; /* only an arena that grows in place (never one that moves) */
    int64_t ws_offset = 0, bytes = fc_prog_arena_size(inst, &ws_offset);
    if (bytes <= 0 || bytes > INT64_MAX / 2) return 0;
    /* Within the declared largest shape: nothing more ahead. */
    if (bytes <= __atomic_load_n(&vr->arena_reserved, __ATOMIC_ACQUIRE)) return 0;
    return 2 * bytes > __atomic_load_n(&vr->shared_arena_bytes, __ATOMIC_ACQUIRE) ? 2 * bytes : 0;
}

bool fc_program_arena_ahead(fc_program *vp, int64_t bytes) {
    bool grew = false;
    fc_prog_variant *vr = fc_prog_variant_of(vp);
    fc_program *v = vr ? &vr->x : NULL;
    pthread_mutex_lock(&fc_prog_arena_lock);
    if (v && v->dev && v->arena_region.base && bytes > vr->shared_arena_bytes) {
        /* The device as the caller's thread has it, but with errors going
         * to a context of this thread's own: a failure here is nobody's
         * error (the run that needs the memory grows the arena itself). */
        fc_context *scratch = fc_context_new();
        fc_cuda_device dev = fc_cuda_device_view(v->dev, scratch);
        if (scratch && fc_cuda_region_grow(&dev, &v->arena_region, (size_t)bytes) == FC_OK) {
            __atomic_store_n(&vr->shared_arena_bytes, (int64_t)v->arena_region.mapped, __ATOMIC_RELEASE);
            grew = true;
        }
        fc_context_free(scratch);
    }
    pthread_mutex_unlock(&fc_prog_arena_lock);
    return grew;
}

fc_status fc_program_reserve_arena(fc_program *v, const int64_t *syms, int nsyms) {
    fc_program *inst = NULL;
    fc_status st = fc_program_instance(v, syms, nsyms, &inst);
    fc_prog_variant *vr = fc_prog_variant_of(v);
    if (st != FC_OK) return st;
    int64_t ws_offset = 0, bytes = fc_prog_arena_size(inst, &ws_offset);
    fc_program_free(inst);
    if (bytes < 0) return fc_set_error(v->ctx, FC_ERR_RUNTIME, "program %s: an arena too large", v->d.graph_name);
    if ((st = fc_prog_ensure_device(v)) != FC_OK) return st;
    pthread_mutex_lock(&fc_prog_arena_lock);
    st = fc_prog_grow_arena(vr, bytes, true);
    if (st == FC_OK && bytes > vr->arena_reserved) __atomic_store_n(&vr->arena_reserved, bytes, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fc_prog_arena_lock);
    return st;
}
