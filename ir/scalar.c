/* scalar.c - the scalar semantics of every elementwise op, in float64.
 * One definition, used by the reference interpreter (the oracle) and by
 * constant folding, so a folded constant is exactly what the reference
 * computes. Results are rounded to the node's dtype by the caller. */
#include "ir.h"

#include <math.h>

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

double fc_scalar_eval(fc_op op, double a, double b, double c) {
    switch (op) {
    case FC_OP_NEG: return -a;
    case FC_OP_ABS: return fabs(a);
    case FC_OP_EXP: return exp(a);
    case FC_OP_LOG: return log(a);
    case FC_OP_SQRT: return sqrt(a);
    case FC_OP_RSQRT: return 1.0 / sqrt(a);
    case FC_OP_RECIP: return 1.0 / a;
    case FC_OP_SIN: return sin(a);
    case FC_OP_COS: return cos(a);
    case FC_OP_TANH: return tanh(a);
    case FC_OP_SIGMOID: return sigmoid(a);
    case FC_OP_RELU: return a < 0.0 ? 0.0 : a; /* NaN stays NaN, as torch.relu */
    case FC_OP_GELU: return a * 0.5 * (1.0 + erf(a / sqrt(2.0)));
    case FC_OP_GELU_TANH: {
        const double k = sqrt(2.0 / 3.14159265358979323846);
        return 0.5 * a * (1.0 + tanh(k * (a + 0.044715 * a * a * a)));
    }
    case FC_OP_SILU: return a * sigmoid(a);
    /* x * relu6(x + 3) / 6, the formula torch.nn.functional.hardswish and
     * ONNX HardSwish compute (so -inf gives NaN, as 0 * inf); NaN stays NaN. */
    case FC_OP_HARDSWISH: return isnan(a) ? a : a * fmin(fmax(a + 3.0, 0.0), 6.0) / 6.0;
    case FC_OP_ERF: return erf(a);
    case FC_OP_ADD: return a + b;
    case FC_OP_SUB: return a - b;
    case FC_OP_MUL: return a * b;
    case FC_OP_DIV: return a / b;
    /* max/min propagate NaN, as torch.maximum/minimum (not fmax/fmin). */
    case FC_OP_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case FC_OP_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case FC_OP_POW: return pow(a, b);
    case FC_OP_EQ: return a == b;
    case FC_OP_NE: return a != b;
    case FC_OP_LT: return a < b;
    case FC_OP_LE: return a <= b;
    case FC_OP_GT: return a > b;
    case FC_OP_GE: return a >= b;
    case FC_OP_WHERE: return a != 0.0 ? b : c;
    case FC_OP_CAST: return a; /* the rounding of the result does the cast */
    default: break;
    }
    FC_UNREACHABLE("fc_scalar_eval: not an elementwise op");
}
