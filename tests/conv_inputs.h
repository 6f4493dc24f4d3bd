/* conv_inputs.h - the inputs the convolution tests run graphs on with the
 * reference interpreter (test_conv_ref.c in f64, test_conv_library.c in
 * f32): pseudo-random values in [-2, 2), and positive ones for a parameter
 * named v* (a variance must be). Included by one test file each. */
#ifndef FC_TESTS_CONV_INPUTS_H
#define FC_TESTS_CONV_INPUTS_H

#include "fusec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* Pseudo-random values in [-2, 2). */
static double conv_rnd(uint64_t i) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (double)(x % 4096) / 1024.0 - 2.0;
}

/* Run g on the reference with such inputs, each of dtype dt (FC_F64 or
 * FC_F32); outputs into out. */
static fc_status conv_run_ref(fc_graph *g, fc_dtype dt, fc_tensor *out, int nout) {
    int nin = fc_graph_num_params(g);
    fc_tensor in[32];
    for (int i = 0; i < nin; i++) {
        fc_value *p = fc_graph_param(g, i);
        in[i] = (fc_tensor){.dtype = dt, .rank = fc_value_rank(p)};
        for (int d = 0; d < in[i].rank; d++) in[i].shape[d] = fc_value_dim(p, d);
        int64_t n = fc_tensor_numel(&in[i]);
        void *data = malloc(fc_dtype_size(dt) * (size_t)(n + 1));
        bool positive = fc_value_name(p)[0] == 'v';
        for (int64_t k = 0; k < n; k++) {
            double r = conv_rnd((uint64_t)(i * 100003 + k));
            double v = positive ? 0.5 + fabs(r) : r;
            if (dt == FC_F32) ((float *)data)[k] = (float)v;
            else ((double *)data)[k] = v;
        }
        in[i].data = data;
    }
    fc_status st = fc_run_reference(g, in, nin, out, nout);
    for (int i = 0; i < nin; i++) free(in[i].data);
    return st;
}

#endif
