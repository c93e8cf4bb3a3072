#include "ggml-ops.h"

#include <cmath>

float ggml_logit(int prev, int next) {
    return (float) ((prev * 31 + next * 17) % 97) / 24.0f;
}

void ggml_op_compute(int op, const float * a, const float * b, float * dst, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        sum += (double) a[i] * a[i];
    }
    const float scale = 1.0f / std::sqrt((float) (sum / n) + 1e-6f);
    for (int i = 0; i < n; i++) {
        switch (op) {
            case GGML_OP_ADD:      dst[i] = a[i] + b[i]; break;
            case GGML_OP_MUL:      dst[i] = a[i] * b[i]; break;
            case GGML_OP_SCALE:    dst[i] = a[i] * 0.25f; break;
            case GGML_OP_RMS_NORM: dst[i] = a[i] * scale; break;
            default:               dst[i] = 0.0f; break;
        }
    }
}
