/*
 * launch_cost.h - what a launch costs and where its ops are written, for
 * the profile (runtime/profile.c): the bytes its arguments hold, the FLOPs
 * its ops compute, and the source lines (or an imported model's value
 * names) of the ops it covers.
 *
 * Both code generators' launches get these from their plan groups: codegen
 * fills fc_launch's fields, the CPU backend asks for its groups. Counts are
 * of the work as written, not of what a kernel re-reads: bytes are each
 * argument once (inputs read, outputs written), FLOPs one per element of an
 * elementwise op or a reduction's input, a small constant per element for a
 * norm or softmax, 2 M N K for a matmul and 4 B H Sq Sk D for attention
 * (half of it when causal). So bytes / time is the achieved bandwidth a
 * roofline plots.
 */
#ifndef FC_LOWER_LAUNCH_COST_H
#define FC_LOWER_LAUNCH_COST_H

#include "lower/launch.h"
#include "passes/epilogue.h" /* fc_gemm_info_of */
#include "passes/passes.h"

#include <stddef.h>

/* The cost of groups first .. last of plan (a batch, or one group), with
 * `extra` (a group folded into the launch, or -1): bytes of their
 * arguments, FLOPs; either -1 when a shape is symbolic. */
void fc_launch_cost(const fc_plan *plan, int first, int last, int extra, int64_t *bytes, double *flops);
/* Where the ops of those groups are written into buf: "file.ir:12-15,18"
 * (the graph's file, lines sorted and merged), or the value names the
 * importer gave (an ONNX model's tensor names) where ops have no line.
 * *nops: the source ops covered (distinct lines, else nodes). */
void fc_launch_source(const fc_plan *plan, int first, int last, int extra, char *buf, size_t n, int *nops);
/* Both into l (l->bytes, l->flops, l->source, l->nsource_ops). */
void fc_launch_note(fc_launch *l, const fc_plan *plan, int first, int last, int extra);

#endif
