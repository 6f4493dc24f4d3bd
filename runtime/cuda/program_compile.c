/* program_compile.c - fc_compile for CUDA: options, the description a cold compile builds from the plan, the two-level cache around the passes, codegen and NVRTC, and programs made from a description (the program cache, AOT files). */
#include "runtime/collective.h"
#include "runtime/cuda/compile_driver.h"
#include "runtime/nvtx.h"

/* Process-wide counters (fc_compile_counters_get). */
static _Atomic uint64_t count_compiles, count_program_hits, count_kernel_hits, count_nvrtc;

/* ------------------------------------------------------------------ */
/* Options, descriptions, counters.                                    */
/* ------------------------------------------------------------------ */

/* Every compile of a program's source (the cubin, the PTX, an AOT file)
 * uses these, so the PTX is the PTX of the cubin. At most 3. */
int fc_program_extra_nvrtc_options(int sm, bool fast_math, const char **extra) {
    int n = 0;
    if (fast_math) extra[n++] = "--use_fast_math";
    /* sm_90a (wgmma, setmaxnreg) for the Hopper attention kernel, which the
     * codegen emits under the same condition. */
    if (fc_cuda_attention_hopper(sm)) extra[n++] = "--gpu-architecture=sm_90a";
    /* The switches that change the source (ir/switches.def's `source`
     * column) and are set: a macro no kernel reads, there only so that the
     * cache keys of the choices differ. */
    const char *sw = fc_cuda_source_switches();
    if (sw) extra[n++] = sw;
    return n;
}

void fc_program_unit_name(const char *graph_name, char *buf, size_t n) {
    snprintf(buf, n, "fusec_%.64s.cu", graph_name ? graph_name : "program");
}





const char *fc_program_origin_name(fc_program_origin o) {
    switch (o) {
    case FC_PROGRAM_COMPILED: return "compiled";
    case FC_PROGRAM_KERNEL_CACHE: return "kernel cache";
    case FC_PROGRAM_PROGRAM_CACHE: return "program cache";
    case FC_PROGRAM_FILE: return "file";
    }
    return "?";
}

void fc_compile_counters_get(fc_compile_counters *out) {
    if (!out) return;
    out->compiles = atomic_load(&count_compiles);
    out->program_hits = atomic_load(&count_program_hits);
    out->kernel_hits = atomic_load(&count_kernel_hits);
    out->nvrtc_compiles = atomic_load(&count_nvrtc);
}

/* ------------------------------------------------------------------ */
/* Compiling.                                                          */
/* ------------------------------------------------------------------ */


/* Device 0's properties, when there is a device (NULL context: a missing
 * one is not an error here). */
static bool device_info(fc_cuda_device_info *info) {
    return fc_cuda_available(NULL) && fc_cuda_device_query(NULL, 0, info) == FC_OK;
}

/* sm 0 means the device's own compute capability, or sm_90 when there is
 * no device: NVRTC needs none, and the H100/H200 is the target. */
static int resolve_sm(int sm) {
    fc_cuda_device_info info;
    if (sm > 0) return sm;
    return device_info(&info) ? info.cc_major * 10 + info.cc_minor : 90;
}

/* The device's streaming multiprocessors, 0 when there is no device (the
 * code generator then assumes an H100/H200's 132). */
int fc_prog_device_sm_count(void) {
    fc_cuda_device_info info;
    return device_info(&info) ? info.sm_count : 0;
}

/* What a description records of the compile options: the resolved target
 * and the switches that change the code or the GEMMs. */
void fc_prog_set_target(fc_program_desc *d, const fc_compile_options *o) {
    d->sm = resolve_sm(o->sm);
    d->fast_math = o->fast_math;
    d->fuse = o->fuse;
    /* FC_PRECISION_F32 is f32 math: no TF32 even when allowed. */
    d->tf32 = o->precision == FC_PRECISION_TF32 || (o->allow_tf32 && o->precision != FC_PRECISION_F32);
    d->precision = o->precision;
    d->numerics = o->numerics;
}

/* Where value id lives (the table at the top of the file), given its
 * arena offset (-1: none) and its size. */
fc_store fc_prog_store_at(const fc_plan_classes *c, int id, int64_t offset, int64_t bytes) {
    fc_store s = {FC_STORE_NONE, 0, 0};
    if (!c->val[id]) return s;
    s.bytes = bytes;
    const fc_value *r = c->val[c->root[id]];
    if (r->param_index >= 0) {
        s.kind = FC_STORE_INPUT;
        s.index = r->param_index;
    } else if (c->result_slot[r->id] >= 0) {
        s.kind = FC_STORE_OUTPUT;
        s.index = c->result_slot[r->id];
    } else if (offset >= 0) {
        s.kind = FC_STORE_ARENA;
        s.index = offset;
    }
    return s;
}

static fc_store store_of(const fc_plan_classes *c, const fc_plan *plan, int id) {
    const fc_value *v = c->val[id];
    return fc_prog_store_at(c, id, plan->offset ? plan->offset[id] : -1, v ? fc_value_bytes(v) : 0);
}

/* Where result k is copied from after the launches, when no kernel writes
 * it in place (a parameter, or a view of one, returned as it is; a class
 * whose result slot is another output); FC_STORE_NONE otherwise. bytes:
 * the result's size. */
fc_store fc_prog_copy_source(const fc_plan_classes *c, const fc_graph *g, int k, int64_t bytes) {
    const fc_value *r = c->val[c->root[g->outputs[k]->id]];
    if (r->param_index >= 0) return (fc_store){FC_STORE_INPUT, r->param_index, bytes};
    if (c->result_slot[r->id] != k) return (fc_store){FC_STORE_OUTPUT, c->result_slot[r->id], bytes};
    return (fc_store){FC_STORE_NONE, 0, 0};
}

/* v's type (symbolic dims kept as they are). */

/* Check that every launch argument and every result has storage in the
 * plan's classes (so that a mismatch between the plan and the codegen
 * shows up at compile time, in CI, not as a bad pointer on a GPU), and
 * fill the description from them. */
static fc_status fill_desc(fc_program *p, const fc_plan_classes *c) {
    fc_graph *g = p->g;
    const fc_plan *plan = &p->plan;
    fc_program_desc *d = &p->d;

    /* A result class not rooted at a parameter must be written by a group. */
    for (int k = 0; k < g->noutputs; k++) {
        const fc_value *r = c->val[c->root[g->outputs[k]->id]];
        if (r->param_index >= 0) continue;
        bool written = false;
        for (int pos = 0; pos < plan->ngroups && !written; pos++) {
            const fc_group *grp = plan->groups[pos];
            if (grp->kind == FC_GROUP_ALIAS) continue;
            for (int i = 0; i < grp->noutputs; i++) written |= grp->outputs[i] == r;
        }
        if (!written)
            return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                "internal error: result %d of graph %s is not written by any kernel", k, g->name);
    }

    d->nvalues = c->nvalues;
    d->store = fc_ctx_malloc(p->ctx, sizeof *d->store * (size_t)(c->nvalues + 1));
    if (!d->store) return FC_ERR_NOMEM;
    for (int id = 0; id < c->nvalues; id++) d->store[id] = store_of(c, plan, id);

    /* The parameters (their inout marks included: the host run copies an
     * inout parameter's device buffer back to the caller's) and the
     * results, as every backend's description has them. */
    fc_status st = fc_program_desc_signature(p->ctx, g, d);
    if (st != FC_OK) return st;
    for (int k = 0; k < g->noutputs; k++)
        d->outputs[k].copy_from = fc_prog_copy_source(c, g, k, fc_value_bytes(g->outputs[k]));
    d->arena_bytes = plan->arena_bytes;
    d->intermediate_bytes = plan->intermediate_bytes;

    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (l->kind == FC_LAUNCH_ALIAS) continue;
        for (int a = 0; a < l->nargs; a++) {
            int id = l->args[a];
            if (id < 0 || id >= d->nvalues || d->store[id].kind == FC_STORE_NONE)
                return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                    "internal error: launch %d (%s) argument %d is value %d, which has no storage "
                                    "in the memory plan",
                                    i, l->name, a, id);
        }
    }
    return FC_OK;
}

/* The node of library launch group `id`: its group's only node. */
static const fc_node *library_node(const fc_plan *plan, int id) {
    for (int i = 0; i < plan->ngroups; i++)
        if (plan->groups[i]->id == id) return plan->groups[i]->nnodes == 1 ? plan->groups[i]->nodes[0] : NULL;
    return NULL;
}

/*
 * Each library launch that cuBLASLt runs gets its GEMM's description, and
 * the description is checked against the storage now, as the launch
 * arguments are. A library call cuBLASLt cannot run (an integer matmul,
 * attention) gets none: compiling it is not an error, so that its plan
 * can be inspected, and running it fails with FC_ERR_UNSUPPORTED.
 */
/* Library launch i's convolution (conv_cl node n), checked against the
 * storage as a GEMM's is. */
static fc_status describe_conv(fc_program *p, int i, const fc_node *n) {
    fc_program_desc *d = &p->d;
    const fc_launch *l = &d->src.launches[i];
    if (!d->conv) {
        size_t bytes = sizeof *d->conv * (size_t)d->src.nlaunches;
        if (!(d->conv = fc_ctx_malloc(p->ctx, bytes))) return FC_ERR_NOMEM;
        memset(d->conv, 0, bytes);
    }
    char why[256] = "";
    fc_status st = fc_conv_desc_of(p->ctx, n, l->args, l->nargs, &d->conv[i]);
    if (st == FC_OK) st = fc_program_check_conv(p->ctx, d, i, why, sizeof why);
    else snprintf(why, sizeof why, "%.250s", p->ctx->error);
    if (st == FC_ERR_NOMEM) return st;
    if (st != FC_OK)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: launch %d (%s): its convolution: %s", i, l->name,
                            why);
    return FC_OK;
}

static fc_status describe_gemms(fc_program *p) {
    fc_program_desc *d = &p->d;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        const fc_node *n = l->kind == FC_LAUNCH_LIBRARY ? library_node(&p->plan, l->group) : NULL;
        if (n && n->op == FC_OP_CONV_CL) {
            fc_status st = describe_conv(p, i, n);
            if (st != FC_OK) return st;
            continue;
        }
        if (!n || (n->op != FC_OP_GEMM && n->op != FC_OP_MATMUL)) continue;
        if (!d->gemm) {
            size_t bytes = sizeof *d->gemm * (size_t)d->src.nlaunches;
            if (!(d->gemm = fc_ctx_malloc(p->ctx, bytes))) return FC_ERR_NOMEM;
            memset(d->gemm, 0, bytes);
        }
        fc_status st = fc_gemm_desc_of(p->ctx, n, l->args, l->nargs, &d->gemm[i]);
        if (st == FC_ERR_UNSUPPORTED) continue;
        char why[256] = "";
        if (st == FC_OK) st = fc_program_check_gemm(p->ctx, d, i, why, sizeof why);
        else if (st != FC_ERR_NOMEM) snprintf(why, sizeof why, "%.250s", p->ctx->error);
        if (st == FC_ERR_NOMEM) return st;
        if (st != FC_OK)
            return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: launch %d (%s): its GEMM: %s", i, l->name,
                                why);
    }
    return FC_OK;
}

fc_status fc_prog_build_desc(fc_program *p) {
    fc_plan_classes c;
    fc_status st = fc_plan_classes_make(p->ctx, &p->plan, &c);
    if (st == FC_OK) st = fill_desc(p, &c);
    fc_plan_classes_free(p->ctx, &c);
    return st == FC_OK ? describe_gemms(p) : st;
}

/* The most arguments of any launch (the size of the run's scratch), and
 * how many launches run a GEMM. */
void fc_prog_count_launch_args(fc_program *p) {
    p->max_args = 0;
    p->ngemms = 0;
    p->nconvs = 0;
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        if (l->kind != FC_LAUNCH_ALIAS && l->nargs + l->nsyms > p->max_args) p->max_args = l->nargs + l->nsyms;
        if (fc_program_gemm(&p->d, i)) p->ngemms++;
        if (fc_program_conv(&p->d, i)) p->nconvs++;
    }
}

/* How graph g's 2-D convolutions ran in p's plan, after the note on the
 * path (conv_path): through the library, as elementwise kernels
 * (depthwise), or as im2col and a GEMM (the rest). */
static void count_conv_paths(fc_program *p, const fc_graph *g) {
    int convs = 0, depthwise = 0, library = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        if (n->dead || n->op != FC_OP_CONV || n->in[0]->rank != 4) continue;
        convs++;
        depthwise += fc_conv_is_depthwise(n);
    }
    for (int i = 0; i < p->plan.ngroups; i++)
        for (int k = 0; k < p->plan.groups[i]->nnodes; k++) library += p->plan.groups[i]->nodes[k]->op == FC_OP_CONV_CL;
    size_t len = strlen(p->conv_note);
    if (convs && len)
        snprintf(p->conv_note + len, sizeof p->conv_note - len,
                 "; of %d 2-D convolutions: %d through cuDNN, %d depthwise (elementwise), %d im2col", convs, library,
                 depthwise, convs - library - depthwise);
}

/* The cold path: passes, codegen, description. */
static fc_status plan_and_generate(fc_program *p, fc_graph *g) {
    p->g = fc_graph_clone(g);
    /* The clone does not say why it failed; the graph was checked above,
     * so it is memory unless its message says otherwise. */
    if (!p->g) return strstr(p->ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;

    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.vertical = fo.horizontal = p->opts.fuse;
    fo.precision = p->d.precision;
    fo.numerics = p->d.numerics;
    fo.conv_library = p->conv_library;
    double t = fc_now_ms();
    fc_nvtx_push("fusec: passes");
    fc_status st = fc_pipeline(p->g, &fo, &p->plan);
    fc_nvtx_pop();
    p->times.passes_ms = fc_now_ms() - t;
    if (st != FC_OK) return st;
    count_conv_paths(p, g);
    if (!p->plan.offset) return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: the plan has no memory plan");
    if (p->g->nparams != g->nparams || p->g->noutputs != g->noutputs)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                            "internal error: the passes changed the graph's signature (%d -> %d params, %d -> %d "
                            "results)",
                            g->nparams, p->g->nparams, g->noutputs, p->g->noutputs);

    t = fc_now_ms();
    p->plan.sm = p->d.sm;
    p->plan.numerics = p->d.numerics;
    p->plan.sm_count = fc_prog_device_sm_count(); /* the attention kernel's persistent grid */
    fc_nvtx_push("fusec: codegen");
    st = fc_cuda_codegen(&p->plan, &p->d.src);
    if (st == FC_OK) st = fc_prog_build_desc(p);
    fc_nvtx_pop();
    p->times.codegen_ms = fc_now_ms() - t;
    return st;
}


fc_status fc_prog_nvrtc_setup_make(fc_program *p, nvrtc_setup *n) {
    n->nextra = fc_program_extra_nvrtc_options(p->d.sm, p->d.fast_math, n->extra);
    fc_status st = fc_nvrtc_options_build(p->ctx, p->d.sm / 10, p->d.sm % 10, n->extra, n->nextra, &n->opts);
    n->version_known = fc_nvrtc_version(&n->major, &n->minor) == FC_OK;
    return st;
}

/*
 * A level-2 lookup: on a hit, the description decoded from the entry
 * replaces p->d. An entry that does not decode, or that is not for this
 * very graph and these options (the key says it is; a check costs a
 * strcmp), is a miss: the cold path's put then replaces it. Only running
 * out of memory is an error.
 */
static fc_status lookup_program(fc_program *p, fc_cache *cache, const fc_cache_key *key, bool *hit) {
    *hit = false;
    void *bytes = NULL;
    size_t n = 0;
    fc_status st = fc_cache_get(cache, p->ctx, FC_CACHE_PROGRAM, key, &bytes, &n);
    if (st != FC_OK || !bytes) return st;
    fc_program_desc d;
    st = fc_program_desc_decode(p->ctx, bytes, n, &d);
    fc_free(bytes);
    if (st == FC_ERR_NOMEM) return st;
    if (st != FC_OK) {
        fc_cache_reject(cache, p->ctx, FC_CACHE_PROGRAM, key); /* corrupt, not a hit */
        return FC_OK;
    }
    if (d.sm != p->d.sm || d.fast_math != p->d.fast_math || d.fuse != p->d.fuse || d.precision != p->d.precision ||
        d.numerics != p->d.numerics ||
        strcmp(d.graph_text, p->d.graph_text) != 0) {
        fc_program_desc_release(&d);
        fc_cache_reject(cache, p->ctx, FC_CACHE_PROGRAM, key);
        return FC_OK;
    }
    fc_program_desc_release(&p->d);
    p->d = d;
    *hit = true;
    return FC_OK;
}

/* A cubin as the cache gave it must still look like one: the checksum
 * proves the entry is what was written, not that what was written was
 * right. */
static bool looks_like_cubin(const void *data, size_t n) {
    return n > 64 && memcmp(data, "\x7f" "ELF", 4) == 0;
}

/* Kernel k's NVRTC program name: its own name, so that its key does not
 * depend on the program it came from. */
static void kernel_unit_name(const fc_cuda_kernel *kn, char *buf, size_t n) { snprintf(buf, n, "%s.cu", kn->name); }

static _Thread_local fc_given_cubin *given;
static _Thread_local int ngiven;

void fc_program_give_cubins(fc_given_cubin *k, int n) {
    given = n > 0 ? k : NULL;
    ngiven = n > 0 ? n : 0;
}

void fc_program_kernel_source_hash(const char *source, uint8_t out[16]) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, "fusec kernel source");
    fc_cache_key_add_str(&h, source);
    fc_cache_key key = fc_cache_key_end(&h);
    memcpy(out, key.bytes, 16);
}

/* Kernel kn's cubin from the given ones (a copy in *out): the one of its
 * name, made from its very source. False when there is none. */
static bool given_cubin(fc_context *ctx, const fc_cuda_kernel *kn, fc_bytes *out, fc_status *st) {
    for (int i = 0; i < ngiven; i++) {
        if (strcmp(given[i].name, kn->name) != 0) continue;
        uint8_t hash[16];
        if (!kn->source) return false;
        fc_program_kernel_source_hash(kn->source, hash);
        if (memcmp(hash, given[i].source_hash, 16) != 0) return false;
        if (!(out->data = fc_ctx_malloc(ctx, given[i].size ? given[i].size : 1))) {
            *st = FC_ERR_NOMEM;
            return true;
        }
        memcpy(out->data, given[i].data, given[i].size);
        out->size = given[i].size;
        given[i].used = true;
        return true;
    }
    return false;
}

/* The cubins of the distinct kernels that the cache has (level 1); a
 * kernel with its source gets its key from it first. *missing: how many
 * are still without a cubin. A bad entry is rejected (removed in rw mode),
 * never loaded. */
static fc_status cached_kernels(fc_program *p, fc_cache *cache, const nvrtc_setup *nv, int *missing) {
    fc_program_desc *d = &p->d;
    const int n = d->src.nkernels;
    *missing = 0;
    if (!p->kcubins) {
        p->kcubins = fc_ctx_malloc(p->ctx, sizeof *p->kcubins * (size_t)(n + 1));
        if (!p->kcubins) return FC_ERR_NOMEM;
        memset(p->kcubins, 0, sizeof *p->kcubins * (size_t)(n + 1));
    }
    double t = fc_now_ms();
    fc_status st = FC_OK;
    for (int k = 0; k < n && st == FC_OK; k++) {
        fc_cuda_kernel *kn = &d->src.kernels[k];
        if (p->kcubins[k].data) continue;
        if (given) {
            if (!given_cubin(p->ctx, kn, &p->kcubins[k], &st)) (*missing)++;
            continue;
        }
        if (!cache) {
            (*missing)++;
            continue;
        }
        if (kn->source) {
            char unit[96];
            kernel_unit_name(kn, unit, sizeof unit);
            fc_cache_key key = fc_kernel_cache_key(kn->source, unit, d->sm, nv->opts.opt, nv->opts.count, nv->major, nv->minor);
            memcpy(kn->key, key.bytes, sizeof kn->key);
        }
        fc_cache_key key;
        memcpy(key.bytes, kn->key, sizeof key.bytes);
        void *bin = NULL;
        size_t size = 0;
        st = fc_cache_get(cache, p->ctx, FC_CACHE_KERNEL, &key, &bin, &size);
        if (st == FC_OK && bin && looks_like_cubin(bin, size)) {
            p->kcubins[k].data = bin;
            p->kcubins[k].size = size;
            atomic_fetch_add(&count_kernel_hits, 1);
            continue;
        }
        if (bin) fc_cache_reject(cache, p->ctx, FC_CACHE_KERNEL, &key);
        fc_free(bin);
        (*missing)++;
    }
    p->times.cache_ms += fc_now_ms() - t;
    return st;
}

/* The record of a description's kernel key: one key over its kernels'. */
static void record_kernel_key(fc_program_desc *d) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, "fusec kernels");
    for (int k = 0; k < d->src.nkernels; k++) fc_cache_key_add(&h, d->src.kernels[k].key, sizeof d->src.kernels[k].key);
    fc_cache_key key = fc_cache_key_end(&h);
    memcpy(d->kernel_key, key.bytes, sizeof d->kernel_key);
}

/* The cubin of each distinct kernel of p->d.src: from the cache (level
 * 1), else NVRTC, all that miss at once on a few threads, each then stored
 * under its own key. *from_cache: every one came from the cache. A failed
 * store is not an error: the compile succeeded (its message stays on the
 * context). */
fc_status fc_prog_get_cubin(fc_program *p, fc_cache *cache, const nvrtc_setup *nv, bool *from_cache) {
    *from_cache = false;
    fc_program_desc *d = &p->d;
    int missing = 0;
    fc_status st = cached_kernels(p, cache, nv, &missing);
    if (st != FC_OK) return st;
    record_kernel_key(d);
    /* A program of library calls only has no kernel to find: compiled. */
    *from_cache = missing == 0 && d->src.nkernels > 0;
    if (missing == 0) return FC_OK;
    if (given) {
        for (int k = 0; k < d->src.nkernels; k++)
            if (!p->kcubins[k].data)
                return fc_set_error(p->ctx, FC_ERR_INPUT,
                                    "the file has no cubin made from kernel %s as this fusec plans it (a file from "
                                    "another fusec: compile the model again)",
                                    d->src.kernels[k].name);
    }
    const char **src = fc_ctx_malloc(p->ctx, sizeof *src * (size_t)missing * 2);
    char (*names)[96] = fc_ctx_malloc(p->ctx, sizeof *names * (size_t)missing);
    int *which = fc_ctx_malloc(p->ctx, sizeof *which * (size_t)missing);
    fc_bytes *made = fc_ctx_malloc(p->ctx, sizeof *made * (size_t)missing);
    if (!src || !names || !which || !made) st = FC_ERR_NOMEM;
    int m = 0;
    for (int k = 0; k < d->src.nkernels && st == FC_OK; k++) {
        if (p->kcubins[k].data) continue;
        if (!d->src.kernels[k].source) {
            st = fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: kernel %s has no source to compile", d->src.kernels[k].name);
            break;
        }
        kernel_unit_name(&d->src.kernels[k], names[m], sizeof names[m]);
        src[m] = d->src.kernels[k].source;
        src[missing + m] = names[m];
        which[m++] = k;
    }
    if (st == FC_OK) {
        double t = fc_now_ms();
        fc_nvtx_push("fusec: NVRTC");
        st = fc_nvrtc_compile_many(p->ctx, src, src + missing, m, &nv->opts, fc_nvrtc_threads(m), made);
        fc_nvtx_pop();
        p->times.nvrtc_ms += fc_now_ms() - t;
        atomic_fetch_add(&count_nvrtc, (uint64_t)m);
    }
    for (int i = 0; i < m && st == FC_OK; i++) p->kcubins[which[i]] = made[i];
    if (st == FC_OK && cache) {
        double t = fc_now_ms();
        for (int i = 0; i < m; i++) {
            fc_cache_key key;
            memcpy(key.bytes, d->src.kernels[which[i]].key, sizeof key.bytes);
            fc_cache_note_compile(cache);
            (void)fc_cache_put(cache, p->ctx, FC_CACHE_KERNEL, &key, made[i].data, made[i].size);
        }
        p->times.cache_ms += fc_now_ms() - t;
    }
    fc_free(src);
    fc_free(names);
    fc_free(which);
    fc_free(made);
    return st;
}

/* Store the description as a level-2 entry; failures are not errors. */
static void store_program(fc_program *p, fc_cache *cache, const fc_cache_key *key) {
    double t = fc_now_ms();
    fc_bytes blob = {NULL, 0};
    if (fc_program_desc_encode(p->ctx, &p->d, &blob) == FC_OK)
        (void)fc_cache_put(cache, p->ctx, FC_CACHE_PROGRAM, key, blob.data, blob.size);
    fc_bytes_free(&blob);
    p->times.cache_ms += fc_now_ms() - t;
}

/* Whether g's 2-D convolutions go to cuDNN (it loads here), with the
 * plan's line saying so or why not; false for a graph without them. */
static bool conv_path(fc_program *p, const fc_graph *g) {
    p->conv_note[0] = 0;
    bool any = false;
    for (int i = 0; i < g->nnodes && !any; i++)
        any = !g->nodes[i]->dead && g->nodes[i]->op == FC_OP_CONV && g->nodes[i]->in[0]->rank == 4;
    if (!any) return false;
    size_t version = 0;
    char why[256] = "";
    if (fc_cudnn_available(&version, why, sizeof why)) {
        snprintf(p->conv_note, sizeof p->conv_note, "convolutions: cuDNN %zu.%zu.%zu (2-D, not depthwise, even pads)",
                 version / 10000, version / 100 % 100, version % 100);
        return true;
    }
    snprintf(p->conv_note, sizeof p->conv_note, "convolutions: im2col and GEMMs (%.160s)", why);
    return false;
}

/* The steps of fc_compile after the program exists; fc_compile frees the
 * program when one fails. */
static fc_status compile_program(fc_program *p, fc_graph *g) {
    fc_program_desc *d = &p->d;
    fc_prog_set_target(d, &p->opts);

    fc_cache *cache = NULL;
    fc_status st = fc_cache_global_open(p->ctx, &cache);
    if (st != FC_OK) return st;
    nvrtc_setup nv;
    st = fc_prog_nvrtc_setup_make(p, &nv);
    if (st != FC_OK) return st;
    /* Without NVRTC's version a cubin's key would not say which compiler
     * made it: do without the cache rather than risk a stale one. */
    if (fc_cache_mode_of(cache) == FC_CACHE_OFF || !nv.version_known) cache = NULL;

    /* The graph's canonical text: the level-2 key, and what a program from
     * the cache or a file re-plans from when asked for its plan. */
    double t = fc_now_ms();
    d->graph_text = fc_print(g);
    if (!d->graph_text) {
        if (strstr(p->ctx->error, "out of memory")) return FC_ERR_NOMEM;
        char why[512];
        snprintf(why, sizeof why, "%.500s", p->ctx->error);
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "internal error: cannot print graph %s: %s", g->name, why);
    }
    bool program_hit = false;
    fc_cache_key pkey = {{0}};
    p->conv_library = conv_path(p, g);
    /* A level-2 entry does not hold convolution descriptions: a program
     * with cuDNN calls is planned again (its kernels come from level 1,
     * its cuDNN plans from their records). */
    if (cache && !p->conv_library) {
        pkey = fc_program_cache_key(d->graph_text, g, d->sm, d->fast_math, d->fuse, d->tf32, d->precision, d->numerics, nv.opts.opt,
                                    nv.opts.count, nv.major, nv.minor);
        st = lookup_program(p, cache, &pkey, &program_hit);
        if (st != FC_OK) return st;
        p->times.cache_ms += fc_now_ms() - t; /* without a cache, the text is "other" time */
    }

    if (program_hit) {
        /* The entry names its kernels by key. One that the cache lacks (or
         * had bad) has no source in the entry: the cold path makes them
         * all again, and meets the others in the cache. */
        int missing = 0;
        if ((st = cached_kernels(p, cache, &nv, &missing)) != FC_OK) return st;
        if (missing > 0) {
            program_hit = false;
            char *text = d->graph_text;
            d->graph_text = NULL;
            for (int k = 0; k < d->src.nkernels; k++) fc_bytes_free(&p->kcubins[k]);
            fc_program_desc_release(d);
            fc_free(p->kcubins);
            p->kcubins = NULL;
            fc_prog_set_target(d, &p->opts);
            d->graph_text = text;
        }
    }
    if (!program_hit && (st = plan_and_generate(p, g)) != FC_OK) return st;
    fc_prog_count_launch_args(p);
    bool kernel_hit = false;
    st = fc_prog_get_cubin(p, cache, &nv, &kernel_hit);
    if (st != FC_OK) return st;
    if (cache && !program_hit && !p->conv_library) store_program(p, cache, &pkey);
    if (cache) {
        /* Publish this compile's hits and misses now: a process that only
         * ever hits would otherwise never write them (puts flush too). */
        fc_context scratch = {0};
        (void)fc_cache_flush_stats(cache, &scratch);
    }
    p->times.origin = program_hit ? FC_PROGRAM_PROGRAM_CACHE
                      : kernel_hit ? FC_PROGRAM_KERNEL_CACHE
                                   : FC_PROGRAM_COMPILED;
    if (program_hit) atomic_fetch_add(&count_program_hits, 1);
    return FC_OK;
}

fc_program *fc_prog_new_exec(fc_context *ctx, fc_prog_kind kind, size_t size) {
    fc_program *p = fc_ctx_malloc(ctx, size);
    if (!p) return NULL;
    memset(p, 0, size);
    p->tag.head.backend = &fc_backend_cuda;
    p->tag.kind = kind;
    p->ctx = ctx;
    return p;
}

/* fc_compile for CUDA (runtime/backend.c checked g, o and out). */
fc_status fc_prog_cuda_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    fc_context *ctx = g->ctx;
    if (o->sm < 0) return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: bad sm %d (90 means sm_90)", o->sm);
    fc_status tp_st = fc_tp_check_options(ctx, o, FC_DEVICE_CUDA);
    if (tp_st != FC_OK) return tp_st;
    /* A dynamic program when asked for and some symbol is unbound
     * (runtime/cuda/dynamic.c); a fully bound graph is static either way. */
    if (o->dynamic && fc_graph_check_static(g) != FC_OK) {
        fc_clear_error(ctx);
        return fc_dynamic_compile(g, o, out);
    }
    /* Before copying anything: the most common mistake, with its fix. */
    fc_status st = fc_graph_check_static(g);
    if (st != FC_OK) return st;

    double t0 = fc_now_ms();
    fc_program *p = fc_prog_new_program(ctx);
    if (!p) return FC_ERR_NOMEM;
    p->opts = *o;
    fc_nvtx_push("fusec: compile");
    st = compile_program(p, g);
    fc_nvtx_pop();
    if (st != FC_OK) {
        fc_program_free(p);
        return st;
    }
    p->times.compile_ms = fc_now_ms() - t0;
    atomic_fetch_add(&count_compiles, 1);
    *out = p;
    return FC_OK;
}

/* Free kcubins, the cubins of d's kernels. */
static void free_kcubins(fc_context *ctx, const fc_program_desc *d, fc_bytes *kcubins) {
    for (int k = 0; kcubins && d && k < d->src.nkernels; k++) fc_bytes_free(&kcubins[k]);
    fc_ctx_freemem(ctx, kcubins);
}

fc_status fc_program_from_desc(fc_context *ctx, fc_program_desc *desc, fc_bytes *kcubins, fc_program_origin origin,
                               fc_program **out) {
    if (out) *out = NULL;
    fc_program *p = desc && out && (kcubins || desc->src.nkernels == 0) ? fc_prog_new_program(ctx) : NULL;
    if (!p) {
        free_kcubins(ctx, desc, kcubins);
        fc_program_desc_release(desc);
        if (!desc || !out || (!kcubins && desc->src.nkernels > 0))
            return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_from_desc: NULL argument");
        return FC_ERR_NOMEM;
    }
    p->d = *desc;
    p->kcubins = kcubins;
    memset(desc, 0, sizeof *desc);
    fc_compile_options_default(&p->opts);
    p->opts.sm = p->d.sm;
    p->opts.fast_math = p->d.fast_math;
    p->opts.fuse = p->d.fuse;
    p->opts.allow_tf32 = p->d.tf32;
    p->opts.precision = p->d.precision;
    p->opts.numerics = p->d.numerics;
    p->times.origin = origin;
    fc_prog_count_launch_args(p);
    *out = p;
    return FC_OK;
}
