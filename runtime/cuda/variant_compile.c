/*
 * variant_compile.c - the compile driver of a dynamic program's variant
 * (docs/DYNAMIC.md): the dynamic pipeline, codegen and NVRTC, then the
 * variant's lowered description (lower/variant_desc.h), from which
 * program_variant.c makes each shape with no pass and no code generator.
 */
#include "runtime/cuda/compile_driver.h"

/* The node of library launch group `id`: its group's only node. */
static const fc_node *group_node(const fc_plan *plan, int id) {
    for (int i = 0; i < plan->ngroups; i++)
        if (plan->groups[i]->id == id) return plan->groups[i]->nnodes == 1 ? plan->groups[i]->nodes[0] : NULL;
    return NULL;
}

/* Each library launch's GEMM as types (a library call that is not a gemm
 * or matmul has none: running it fails cleanly, as at compile time). */
static fc_status lower_gemms(fc_program *v, fc_variant_desc *vd) {
    const int nl = v->d.src.nlaunches;
    for (int i = 0; i < nl; i++) {
        const fc_launch *l = &v->d.src.launches[i];
        const fc_node *n = l->kind == FC_LAUNCH_LIBRARY ? group_node(&v->plan, l->group) : NULL;
        if (!n || (n->op != FC_OP_GEMM && n->op != FC_OP_MATMUL)) continue;
        if (!vd->gemm) {
            if (!(vd->gemm = fc_ctx_malloc(v->ctx, sizeof *vd->gemm * (size_t)nl))) return FC_ERR_NOMEM;
            memset(vd->gemm, 0, sizeof *vd->gemm * (size_t)nl);
        }
        fc_status st = fc_gemm_form_of(v->ctx, n, l->args, l->nargs, &vd->gemm[i]);
        if (st != FC_OK) return st;
        vd->gemm_weights += vd->gemm[i].info.nweights;
    }
    return FC_OK;
}

/*
 * The variant's lowered description: the memory plan's layout, every
 * value's storage kind and each result's copy source (which do not depend
 * on the shape), which kernels' grids are per shape, and each GEMM's
 * form; so that a shape only places the arena and evaluates sizes, grids
 * and GEMM plans.
 */
static fc_status lower_variant(fc_prog_variant *vr) {
    fc_program *v = &vr->x;
    fc_variant_desc *vd = &vr->lowered;
    fc_status st = fc_memplan_layout_make(&v->plan, &vd->arena);
    if (st != FC_OK) return st;
    const int nv = vd->arena->nvalues, nl = v->d.src.nlaunches;
    fc_plan_classes c;
    if ((st = fc_plan_classes_make(v->ctx, &v->plan, &c)) != FC_OK) return st;
    vd->store = fc_ctx_malloc(v->ctx, sizeof *vd->store * (size_t)(nv + 1));
    vd->grid_sized = fc_ctx_malloc(v->ctx, sizeof *vd->grid_sized * (size_t)(nl + 1));
    if (!vd->store || !vd->grid_sized) st = FC_ERR_NOMEM;
    /* Which values live in the arena does not depend on the sizes: the
     * classes the layout places (their offsets are per shape). */
    for (int id = 0; id < nv && st == FC_OK; id++)
        vd->store[id] = fc_prog_store_at(&c, id, vd->arena->class_of[id] >= 0 ? 0 : -1, 0);
    for (int k = 0; k < v->d.noutputs && st == FC_OK; k++) v->d.outputs[k].copy_from = fc_prog_copy_source(&c, v->g, k, 0);
    fc_plan_classes_free(v->ctx, &c);
    for (int i = 0; i < nl && st == FC_OK; i++) {
        const fc_launch *l = &v->d.src.launches[i];
        /* A frame kernel has one grid for every shape (frame_setup); a
         * kernel whose grid formulas are constants (a GEMM's persistent
         * grid) has the variant's grid at every shape. */
        vd->grid_sized[i] = l->kind == FC_LAUNCH_KERNEL && l->nsyms > 0 && !l->frame &&
                            !(fc_mono_is_static(&l->grid_work[0]) && fc_mono_is_static(&l->grid_work[1]) &&
                              fc_mono_is_static(&l->grid_work[2]));
    }
    return st == FC_OK ? lower_gemms(v, vd) : st;
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
        fo.numerics = o->numerics;
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
        if (st == FC_OK) st = fc_program_desc_signature(p->ctx, p->g, d);
        if (st == FC_OK) st = lower_variant(vr);
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
    /* Frame kernels only: one graph for every shape. */
    vr->shared_graph = fc_replay_kernels_only(d) && d->src.frame_words > 0;
    *out = p;
    return FC_OK;
}
