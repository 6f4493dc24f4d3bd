/*
 * arena_layout.h - a memory plan as data: which values share the arena,
 * when each is live, and every size as a formula of the symbols; placed at
 * one shape by best fit (arena_layout.c).
 *
 * The memory plan (passes/memplan.c) makes a layout from a plan and places
 * it at the plan's static sizes. A dynamic variant keeps the layout in its
 * lowered description and places it at each new shape's symbol values
 * (lower/variant_desc.h), so that a new shape's memory plan is a few
 * hundred operations, no allocation and no pass. The layout is here, below
 * both, so that the two use one placement rule and give the same offsets
 * for the same sizes. It points into no graph.
 */
#ifndef FC_IR_ARENA_LAYOUT_H
#define FC_IR_ARENA_LAYOUT_H

#include "ir/ir.h"

#include <stdbool.h>
#include <stdint.h>

/* One distinct size: a dtype's bytes times dims (static or symbols). */
typedef struct fc_arena_form {
    int esize;
    int rank;
    fc_dim dims[FC_MAX_RANK];
    bool checked; /* a value that is not a weak scalar has it: its overflow is an error */
} fc_arena_form;

/* A storage class that needs arena memory: its root value, its lifetime
 * (launch positions, inclusive) and its members' forms
 * (class_forms[forms_at .. forms_at + nforms)): its size is the largest. */
typedef struct fc_arena_class {
    int root, first, last;
    int forms_at, nforms;
} fc_arena_class;

typedef struct fc_arena_layout {
    fc_context *ctx;        /* its arrays' and its errors' */
    const char *graph_name; /* for messages; outlives the layout (its maker's graph) */
    int nvalues;            /* value ids are 0 .. nvalues-1 */
    int nforms;
    fc_arena_form *form;
    int *form_of;  /* by value id: its form; -1 for values the plan never names */
    int *class_of; /* by value id: the arena class whose offset it takes; -1: not in the arena */
    int nclasses;
    fc_arena_class *cls;
    int *class_forms;
} fc_arena_layout;

/* Free l and its arrays (through l->ctx). NULL is ignored. */
void fc_arena_layout_free(fc_arena_layout *l);

/*
 * Place l at sym_values (NULL: every dim is static): offset[id] for every
 * value id (-1: not in the arena), and when bytes is not NULL each value's
 * size (0 for a value the plan never names); the arena's size and what
 * the intermediates would take without sharing. Classes go largest first
 * (ties: earlier start, then lower root id), each into the smallest gap
 * between the classes already placed whose lifetimes overlap its own, or
 * above them all; offsets and sizes are multiples of 256 bytes.
 * Allocates nothing for up to 64 classes and forms. FC_ERR_INPUT when a
 * size overflows 64 bits; FC_ERR_NOMEM.
 */
fc_status fc_arena_layout_place(const fc_arena_layout *l, const int64_t *sym_values, int64_t *offset, int64_t *bytes,
                                int64_t *arena_bytes, int64_t *intermediate_bytes);

/* esize times the product of dims[0 .. rank), each symbol given by
 * sym_values (NULL: every dim is static); -1 on overflow of 64 bits. */
int64_t fc_dims_bytes_at(int esize, const fc_dim *dims, int rank, const int64_t *sym_values);

#endif
