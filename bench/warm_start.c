/*
 * warm_start.c - where a warm start of a whole model spends its time, on
 * the GPU machine (docs/PERF.md): a model whose program is in the cache,
 * compiled in a process that already has a CUDA context, then readied
 * and run once.
 *
 *   ninja warm_start && ./warm_start MODEL.ir B=1,T=128 [CACHE_DIR]
 *
 * Without a GPU it times the host steps (parse, compiles, -o) alone.
 *
 * Steps, each timed on its own (ms, wall clock):
 *   driver     dlopen(libcuda) and cuInit (a server pays it once)
 *   context    device 0's primary context and fusec's stream
 *   parse      the .ir text, symbols bound
 *   cold       the first compile (fills CACHE_DIR when it was empty; not
 *              a warm start, only there so that the next ones are)
 *   warm-disk  the cache's in-process layer dropped (fc_cache_global_close):
 *              a compile served from the disk, as a new process's would be,
 *              with fc_compile's own breakdown (cache, other)
 *   warm-mem   the same compile again: the in-process layer
 *   -o         fc_program_save_file of the warm program, and the NVRTC
 *              compiles it ran (0 expected)
 *   prepare    the warm program's modules, kernels, arena, cuBLASLt
 *              handle and GEMM algorithms (fc_program_prepare)
 *   first run  one fc_run and a stream synchronize
 * and "warm start" = warm-disk + prepare + first run, the time from a
 * cache hit to the first output in a process with a context.
 */
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "ir/timing.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...)                                                                                                       \
    do {                                                                                                               \
        fprintf(stderr, "warm_start: " __VA_ARGS__);                                                                   \
        fprintf(stderr, "\n");                                                                                         \
        exit(1);                                                                                                       \
    } while (0)

static uint64_t nvrtc_count(void) {
    fc_compile_counters c;
    fc_compile_counters_get(&c);
    return c.nvrtc_compiles;
}

static fc_program *compile(fc_graph *g, const char *what, double *ms) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    fc_program *p = NULL;
    double t = fc_now_ms();
    if (fc_compile(g, &o, &p) != FC_OK) DIE("%s compile: %s", what, fc_last_error(fc_graph_context(g)));
    *ms = fc_now_ms() - t;
    fc_compile_times ct;
    fc_program_times(p, &ct);
    printf("%-10s %9.3f ms  (%s; fc_compile: cache %.3f, passes %.3f, codegen %.3f, nvrtc %.3f)\n", what, *ms,
           fc_program_origin_name(ct.origin), ct.cache_ms, ct.passes_ms, ct.codegen_ms, ct.nvrtc_ms);
    return p;
}

int main(int argc, char **argv) {
    if (argc < 3) DIE("usage: warm_start MODEL.ir B=1,T=128 [CACHE_DIR]");
    if (argc > 3) fc_cache_configure(argv[3]);
    fc_binding b[8];
    int nb = 0;
    char *spec = strdup(argv[2]);
    for (char *s = strtok(spec, ","); s && nb < 8; s = strtok(NULL, ",")) {
        char *eq = strchr(s, '=');
        if (!eq) DIE("bad binding %s", s);
        *eq = 0;
        b[nb].name = s;
        b[nb++].value = atoll(eq + 1);
    }
    fc_context *ctx = fc_context_new();
    double t = fc_now_ms();
    bool gpu = fc_cuda_available(ctx);
    printf("%-10s %9.3f ms\n", "driver", fc_now_ms() - t);
    fc_cuda_device *dev = NULL;
    if (gpu) {
        t = fc_now_ms();
        if (fc_cuda_device_open(ctx, 0, &dev) != FC_OK) DIE("no device: %s", fc_last_error(ctx));
        printf("%-10s %9.3f ms\n", "context", fc_now_ms() - t);
    } else {
        printf("no CUDA (%s): the host steps only\n", fc_last_error(ctx));
    }

    fc_graph *g = NULL;
    t = fc_now_ms();
    if (fc_parse_file(ctx, argv[1], NULL, b, nb, &g) != FC_OK) DIE("%s", fc_last_error(ctx));
    printf("%-10s %9.3f ms\n", "parse", fc_now_ms() - t);

    double cold_ms, disk_ms, mem_ms;
    fc_program_free(compile(g, "cold", &cold_ms));
    fc_cache_global_close();
    fc_program *p = compile(g, "warm-disk", &disk_ms);
    fc_program_free(compile(g, "warm-mem", &mem_ms));

    char out[512];
    snprintf(out, sizeof out, "%s.warm_start.cubin", argv[1]);
    uint64_t n0 = nvrtc_count();
    t = fc_now_ms();
    if (fc_program_save_file(p, out) != FC_OK) DIE("-o: %s", fc_last_error(ctx));
    printf("%-10s %9.3f ms  (%llu NVRTC compiles)\n", "-o", fc_now_ms() - t, (unsigned long long)(nvrtc_count() - n0));
    remove(out);
    if (!gpu) {
        fc_program_free(p);
        fc_graph_free(g);
        fc_cache_global_close();
        fc_context_free(ctx);
        free(spec);
        return 0;
    }

    t = fc_now_ms();
    if (fc_program_prepare(p) != FC_OK) DIE("prepare: %s", fc_last_error(ctx));
    double prep_ms = fc_now_ms() - t;
    fc_compile_times ct;
    fc_program_times(p, &ct);
    printf("%-10s %9.3f ms  (device %.3f, module load %.3f, %d distinct kernels)\n", "prepare", prep_ms, ct.device_ms,
           ct.load_ms, fc_program_nkernels(p));

    const int nin = fc_program_num_inputs(p), nout = fc_program_num_outputs(p);
    void **in = calloc((size_t)nin + 1, sizeof *in), **outs = calloc((size_t)nout + 1, sizeof *outs);
    for (int i = 0; i < nin + nout; i++) {
        fc_tensor ty;
        if (i < nin) fc_program_input(p, i, &ty, NULL);
        else fc_program_output(p, i - nin, &ty);
        size_t bytes = (size_t)fc_tensor_numel(&ty) * fc_dtype_size(ty.dtype);
        CUdeviceptr d = 0;
        if (fc_cuda_alloc(dev, bytes + 256, &d) != FC_OK ||
            fc_cuda_memset_async(dev, d, 0, bytes + 256, dev->stream) != FC_OK)
            DIE("cannot allocate %zu bytes", bytes);
        (i < nin ? in : outs)[i < nin ? i : i - nin] = (void *)(uintptr_t)d;
    }
    if (fc_cuda_stream_sync(dev, dev->stream) != FC_OK) DIE("sync: %s", fc_last_error(ctx));
    t = fc_now_ms();
    if (fc_run(p, in, nin, outs, nout, dev->stream) != FC_OK || fc_cuda_stream_sync(dev, dev->stream) != FC_OK)
        DIE("run: %s", fc_last_error(ctx));
    double run_ms = fc_now_ms() - t;
    printf("%-10s %9.3f ms\n", "first run", run_ms);
    printf("warm start (warm-disk + prepare + first run): %.3f ms; fc_compile alone %.3f ms (target 5 ms)\n",
           disk_ms + prep_ms + run_ms, disk_ms);

    for (int i = 0; i < nin; i++) fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)in[i]);
    for (int i = 0; i < nout; i++) fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)outs[i]);
    free(in);
    free(outs);
    fc_program_free(p);
    fc_graph_free(g);
    fc_cuda_device_close(dev);
    fc_cache_global_close();
    fc_context_free(ctx);
    free(spec);
    return 0;
}
