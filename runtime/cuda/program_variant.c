/* program_variant.c - a dynamic program's variant and its shape instances, and the arena they share and grow (docs/DYNAMIC.md). */
#include "runtime/cuda/program_impl.h"

/* ------------------------------------------------------------------ */
/* The dynamic variant and its instances (docs/DYNAMIC.md).            */
/* ------------------------------------------------------------------ */


/* The variant's signature: names, dtypes and (symbolic) shapes. Its
 * storage is per shape: an instance's description has it. */
static fc_status variant_signature(fc_program *p) { return fc_program_desc_signature(p->ctx, p->g, &p->d); }

/* A variant of kernels only: the memory plan's layout, every value's
 * storage kind and each result's copy source, made once, so that a shape's
 * instance only places the arena and evaluates sizes and grids. */
static fc_status variant_layout(fc_prog_variant *vr) {
    fc_program *v = &vr->x;
    fc_status st = fc_memplan_layout_make(&v->plan, &vr->layout);
    if (st != FC_OK) return st;
    const int nv = fc_memplan_layout_nvalues(vr->layout);
    fc_plan_classes c;
    if ((st = fc_plan_classes_make(v->ctx, &v->plan, &c)) != FC_OK) return st;
    /* Which values live in the arena does not depend on the sizes: a
     * placement at every symbol = 1 says which. */
    int64_t ones[FC_DYN_MAX_SYMS], arena, inter;
    for (int k = 0; k < FC_DYN_MAX_SYMS; k++) ones[k] = 1;
    int64_t *off = fc_ctx_malloc(v->ctx, sizeof *off * (size_t)(nv + 1));
    vr->store_kind = fc_ctx_malloc(v->ctx, sizeof *vr->store_kind * (size_t)(nv + 1));
    if (!off || !vr->store_kind) st = FC_ERR_NOMEM;
    if (st == FC_OK) st = fc_memplan_layout_place(vr->layout, ones, off, NULL, &arena, &inter);
    for (int id = 0; id < nv && st == FC_OK; id++) vr->store_kind[id] = fc_prog_store_at(&c, id, off[id], 0);
    for (int k = 0; k < v->d.noutputs && st == FC_OK; k++) v->d.outputs[k].copy_from = fc_prog_copy_source(&c, v->g, k, 0);
    /* A kernel whose grid formulas are constants (a GEMM's persistent
     * grid) has the variant's grid at every shape. */
    const int nl = v->d.src.nlaunches;
    if (st == FC_OK && !(vr->grid_sized = fc_ctx_malloc(v->ctx, sizeof *vr->grid_sized * (size_t)(nl + 1))))
        st = FC_ERR_NOMEM;
    for (int i = 0; i < nl && st == FC_OK; i++) {
        const fc_launch *l = &v->d.src.launches[i];
        /* A frame kernel has one grid for every shape (frame_setup). */
        vr->grid_sized[i] = l->kind == FC_LAUNCH_KERNEL && l->nsyms > 0 && !l->frame;
        if (vr->grid_sized[i] && fc_mono_is_static(&l->grid_work[0]) && fc_mono_is_static(&l->grid_work[1]) &&
            fc_mono_is_static(&l->grid_work[2]))
            vr->grid_sized[i] = false;
    }
    fc_ctx_freemem(v->ctx, off);
    fc_plan_classes_free(v->ctx, &c);
    return st;
}

static size_t round_up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Room for n + 1 elements of size elem at *at (16-byte aligned); *at moves
 * past them. Returns where they start. */
static size_t take(size_t *at, size_t elem, int n) {
    size_t start = *at;
    *at += round_up16(elem * (size_t)(n + 1));
    return start;
}

/*
 * The instance of a variant of kernels only at syms, from its layout: no
 * graph is bound and nothing is planned again. One allocation holds the
 * program, its symbol values, its memory plan's offsets and its
 * description (storage, signature, the variant's launches with this
 * shape's grids, or the variant's own for frame kernels); the per-shape
 * work is the arena placement, a size per distinct value shape and three
 * grid formulas per kernel whose grid is per shape. The result is
 * what binding the graph (fc_plan_bind, then build_desc) makes, value by
 * value (tests/test_dynamic.c checks it).
 */
static fc_status instance_from_layout(fc_prog_variant *vr, const int64_t *syms, int nsyms, fc_program **out) {
    const fc_program *v = &vr->x;
    fc_status st = fc_graph_check_bind_values(v->plan.g, syms, nsyms);
    if (st != FC_OK) return st;
    const int nv = fc_memplan_layout_nvalues(vr->layout), np = v->d.nparams, no = v->d.noutputs;
    const int nl = v->d.src.nlaunches;
    /* Frame kernels: the variant's launches themselves, whose grids are
     * every shape's (set when the variant's device is ready); else a copy
     * with this shape's grids. */
    const bool frame = v->d.src.frame_words > 0;
    /* The allocation's parts, one after another, each 16-byte aligned. */
    size_t at = round_up16(sizeof(fc_prog_instance));
    const size_t at_syms = take(&at, sizeof(int64_t), nsyms), at_offset = take(&at, sizeof(int64_t), nv),
                 at_bytes = take(&at, sizeof(int64_t), nv), at_store = take(&at, sizeof(fc_store), nv),
                 at_params = take(&at, sizeof(fc_program_tensor), np),
                 at_outputs = take(&at, sizeof(fc_program_tensor), no),
                 at_launches = frame ? 0 : take(&at, sizeof(fc_launch), nl);
    char *block = fc_ctx_malloc(v->ctx, at);
    if (!block) return fc_set_error(v->ctx, FC_ERR_NOMEM, "out of memory (a shape of program %s)", v->d.graph_name);
    fc_prog_instance *in = (fc_prog_instance *)(void *)block;
    memset(in, 0, sizeof *in);
    fc_program *p = &in->x;
    p->tag.head.backend = &fc_backend_cuda;
    p->tag.kind = FC_PROG_INSTANCE;
    p->ctx = v->ctx;
    p->opts = v->opts;
    in->desc_inline = true;
    in->variant = vr;
    in->syms = (int64_t *)(void *)(block + at_syms);
    memcpy(in->syms, syms, sizeof *syms * (size_t)nsyms);
    in->nsyms = nsyms;
    /* The plan: the variant's graph and groups (borrowed: it owns nothing),
     * the symbol values its grids are evaluated at, and the placement. */
    fc_plan *plan = &p->plan;
    plan->g = p->g = v->plan.g; /* not p's to free */
    plan->groups = v->plan.groups;
    plan->ngroups = v->plan.ngroups;
    plan->group_of_node = v->plan.group_of_node;
    plan->sm = v->plan.sm;
    plan->numerics = v->plan.numerics;
    plan->nsyms = nsyms;
    plan->sym_values = in->syms;
    plan->offset = (int64_t *)(void *)(block + at_offset);
    int64_t *bytes = (int64_t *)(void *)(block + at_bytes);
    st = fc_memplan_layout_place(vr->layout, syms, plan->offset, bytes, &plan->arena_bytes, &plan->intermediate_bytes);
    fc_program_desc *d = &p->d;
    /* The variant's target, as resolved (no device query per shape). */
    d->sm = v->d.sm;
    d->fast_math = v->d.fast_math;
    d->fuse = v->d.fuse;
    d->tf32 = v->d.tf32;
    d->precision = v->d.precision;
    d->numerics = v->d.numerics;
    d->graph_name = v->d.graph_name;
    d->arena_bytes = plan->arena_bytes;
    d->intermediate_bytes = plan->intermediate_bytes;
    d->nvalues = nv;
    d->store = (fc_store *)(void *)(block + at_store);
    for (int id = 0; id < nv; id++) {
        d->store[id] = vr->store_kind[id];
        d->store[id].bytes = bytes[id];
        if (d->store[id].kind == FC_STORE_ARENA) d->store[id].index = plan->offset[id];
    }
    d->nparams = np;
    d->noutputs = no;
    d->params = (fc_program_tensor *)(void *)(block + at_params);
    d->outputs = (fc_program_tensor *)(void *)(block + at_outputs);
    for (int i = 0; i < np + no; i++) {
        fc_program_tensor *t = i < np ? &d->params[i] : &d->outputs[i - np];
        *t = i < np ? v->d.params[i] : v->d.outputs[i - np];
        for (int q = 0; q < t->rank; q++) t->dims[q] = fc_dim_value(t->dims[q], syms);
        if (i >= np && t->copy_from.kind != FC_STORE_NONE) t->copy_from.bytes = bytes[t->value];
    }
    d->src.nlaunches = nl;
    d->src.frame_words = v->d.src.frame_words;
    d->src.frame_carried = v->d.src.frame_carried;
    if (frame) d->src.launches = v->d.src.launches;
    else {
        d->src.launches = (fc_launch *)(void *)(block + at_launches);
        memcpy(d->src.launches, v->d.src.launches, sizeof(fc_launch) * (size_t)nl);
    }
    for (int i = 0; i < nl && st == FC_OK; i++)
        if (vr->grid_sized[i]) st = fc_cuda_launch_grid(plan, &v->d.src.launches[i], d->src.launches[i].grid);
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    p->max_args = v->max_args;
    *out = p;
    return FC_OK;
}

fc_status fc_program_compile_variant(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    *out = NULL;
    double t0 = fc_now_ms();
    fc_prog_variant *vr = (fc_prog_variant *)(void *)fc_prog_new_exec(g->ctx, FC_PROG_VARIANT, sizeof(fc_prog_variant));
    if (!vr) return FC_ERR_NOMEM;
    fc_program *p = &vr->x;
    p->opts = *o;
    fc_program_desc *d = &p->d;
    fc_prog_set_target(d, o);
    fc_cache *cache = NULL;
    fc_status st = fc_cache_global_open(p->ctx, &cache);
    nvrtc_setup nv;
    if (st == FC_OK) st = fc_prog_nvrtc_setup_make(p, &nv);
    if (st == FC_OK && (fc_cache_mode_of(cache) == FC_CACHE_OFF || !nv.version_known)) cache = NULL;
    if (st == FC_OK) {
        p->g = fc_graph_clone(g);
        if (!p->g) st = strstr(p->ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;
    }
    if (st == FC_OK) {
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.vertical = fo.horizontal = o->fuse;
        fo.precision = o->precision;
        fo.dynamic = true;
        double t = fc_now_ms();
        st = fc_pipeline(p->g, &fo, &p->plan);
        p->times.passes_ms = fc_now_ms() - t;
    }
    if (st == FC_OK) {
        double t = fc_now_ms();
        p->plan.sm = d->sm;
        p->plan.numerics = d->numerics;
        p->plan.sm_count = fc_prog_device_sm_count();
        st = fc_cuda_codegen(&p->plan, &d->src);
        if (st == FC_OK) st = variant_signature(p);
        p->times.codegen_ms = fc_now_ms() - t;
    }
    bool kernel_hit = false;
    if (st == FC_OK) {
        fc_prog_count_launch_args(p);
        st = fc_prog_get_cubin(p, cache, &nv, &kernel_hit);
    }
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    p->times.origin = kernel_hit ? FC_PROGRAM_KERNEL_CACHE : FC_PROGRAM_COMPILED;
    p->times.compile_ms = fc_now_ms() - t0;
    /* Kernels only: one graph for every shape, and instances made from the
     * layout (a cuBLASLt call's description is made from its bound node). */
    const bool kernels_only = fc_replay_kernels_only(d);
    vr->shared_graph = kernels_only && d->src.frame_words > 0;
    if (kernels_only && (st = variant_layout(vr)) != FC_OK) {
        fc_program_free(p);
        return st;
    }
    *out = p;
    return FC_OK;
}

fc_status fc_program_instance(fc_program *vp, const int64_t *syms, int nsyms, fc_program **out) {
    *out = NULL;
    fc_prog_variant *vr = fc_prog_variant_of(vp);
    if (!vr) return fc_set_error(fc_program_context(vp), FC_ERR_USAGE, "fc_program_instance: not a variant");
    const fc_program *v = &vr->x;
    if (vr->layout) return instance_from_layout(vr, syms, nsyms, out);
    /* Library launches: the whole graph bound to the shape (a cuBLASLt
     * call's description is made from its bound node). */
    fc_prog_instance *in =
        (fc_prog_instance *)(void *)fc_prog_new_exec(v->ctx, FC_PROG_INSTANCE, sizeof(fc_prog_instance));
    if (!in) return FC_ERR_NOMEM;
    fc_program *p = &in->x;
    p->opts = v->opts;
    /* The variant's target, as resolved (no device query per shape). */
    p->d.sm = v->d.sm;
    p->d.fast_math = v->d.fast_math;
    p->d.fuse = v->d.fuse;
    p->d.tf32 = v->d.tf32;
    p->d.precision = v->d.precision;
    p->d.numerics = v->d.numerics;
    in->variant = vr;
    fc_status st = fc_plan_bind(&v->plan, syms, nsyms, &p->plan);
    if (st == FC_OK) {
        /* The plan's graph: its own bound copy (plan.owned_graph). */
        p->g = p->plan.g;
        in->syms = fc_ctx_malloc(p->ctx, sizeof *in->syms * (size_t)(nsyms + 1));
        fc_launch *ls = fc_ctx_malloc(p->ctx, sizeof *ls * (size_t)(v->d.src.nlaunches + 1));
        if (!in->syms || !ls) {
            fc_ctx_freemem(p->ctx, ls);
            st = FC_ERR_NOMEM;
        } else {
            memcpy(in->syms, syms, sizeof *syms * (size_t)nsyms);
            in->nsyms = nsyms;
            /* The variant's launches, with this shape's grids. fc_cuda_src
             * frees the lists with free(). */
            p->d.src.launches = ls;
            for (int i = 0; i < v->d.src.nlaunches && st == FC_OK; i++) {
                ls[i] = v->d.src.launches[i];
                ls[i].args = malloc(sizeof(int) * (size_t)(ls[i].nargs + 1));
                if (!ls[i].args) {
                    st = FC_ERR_NOMEM;
                    break;
                }
                memcpy(ls[i].args, v->d.src.launches[i].args, sizeof(int) * (size_t)ls[i].nargs);
                p->d.src.nlaunches = i + 1;
                if (ls[i].kind == FC_LAUNCH_KERNEL) st = fc_cuda_launch_grid(&p->plan, &v->d.src.launches[i], ls[i].grid);
            }
        }
    }
    if (st == FC_OK) st = fc_prog_build_desc(p);
    /* Fused siblings' weights are the same at every shape: one
     * concatenation in the variant's handle serves them all. */
    for (int i = 0; st == FC_OK && i < p->d.src.nlaunches; i++)
        if (fc_program_gemm(&p->d, i)) p->d.gemm[i].share = &v->d.src.launches[i];
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
