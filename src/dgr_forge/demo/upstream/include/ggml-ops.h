#pragma once

#ifdef __cplusplus
extern "C" {
#endif

enum { GGML_OP_ADD, GGML_OP_MUL, GGML_OP_SCALE, GGML_OP_RMS_NORM, GGML_OP_COUNT };

// dst = op(a, b) over n floats (the demo's one "backend")
void ggml_op_compute(int op, const float * a, const float * b, float * dst, int n);
// the model's logit of byte `next` after byte `prev` (llama-perplexity's numerics)
float ggml_logit(int prev, int next);

#ifdef __cplusplus
}
#endif
