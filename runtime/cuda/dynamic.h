/*
 * dynamic.h - dynamic programs: shape guards, specializations compiled in
 * the background, the dynamic variant as the fallback (internal header;
 * docs/DYNAMIC.md).
 *
 * A dynamic program (fc_compile with fc_compile_options.dynamic and some
 * symbol unbound) holds:
 *   - the dynamic variant: one compile whose kernels take the symbol values
 *     as arguments (fc_program_compile_variant), run per shape through an
 *     "instance" (fc_program_instance: storage, grids and GEMM
 *     descriptions from the variant's lowered description; a small LRU of
 *     them, each with its CUDA Graph);
 *   - up to max_specializations static programs, one per shape (the symbol
 *     values), in LRU order.
 * Each run binds the symbols from the input shapes (the guard), takes the
 * ready specialization of those shapes (a guard hit), or else (a miss)
 * queues the specialization for the background thread and runs the
 * variant at once.
 */
#ifndef FC_RUNTIME_DYNAMIC_H
#define FC_RUNTIME_DYNAMIC_H

#include "runtime/cuda/program.h"

#include <stdbool.h>
#include <stdint.h>

/* FUSEC_LOG topics: a comma-separated list in the environment ("guards",
 * "graphs", "spec", "all"). Only these print, to stderr; nothing else in
 * the library prints. "spec": each step of the background thread's
 * making and freeing of a specialization, stamped with fc_now_ms (to line
 * up with a caller's slow calls). */
enum { FC_LOG_GUARDS = 1, FC_LOG_GRAPHS = 2, FC_LOG_SPEC = 4 };
bool fc_trace_on(int topic);
void fc_trace(int topic, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

struct fc_dynamic;
/* fc_compile's path for a dynamic program (g has unbound symbols). */
fc_status fc_dynamic_compile(fc_graph *g, const fc_compile_options *o, fc_program **out);
/* The dynamic variant, or NULL when there is none. */
fc_program *fc_dynamic_variant(const struct fc_dynamic *d);
/* fc_program_weights_changed for a dynamic program: its variant's shapes
 * and every ready specialization. */
fc_status fc_dynamic_weights_changed(struct fc_dynamic *d);
/* Free a dynamic program's state (its thread is joined first). NULL ok. */
void fc_dynamic_free(struct fc_dynamic *d);

/*
 * The guard's first half, for any program: bind the symbols of the
 * parameters' shapes from inputs (*syms gets nsyms values, in the graph's
 * symbol order) and check every dtype, static dim and symbol; then the
 * outputs' shapes (when outputs is not NULL) and, when check_ptrs, the
 * 16-byte alignment of every pointer. FC_ERR_INPUT with a message naming
 * the input and dim on failure.
 */
fc_status fc_guard_bind(fc_context *ctx, const fc_program_desc *sig, const char *const *sym_names, int nsyms,
                        const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout, bool check_ptrs,
                        int64_t *syms);

/* For tests without a GPU: the decision a run would make for these
 * symbol values, and its bookkeeping (stats, queueing), without launching
 * anything. *spec is the ready specialization (NULL: the variant serves). */
fc_status fc_dynamic_select(fc_program *p, const int64_t *syms, fc_program **spec);

#endif
