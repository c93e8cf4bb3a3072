#pragma once

#define LLAMA_MAX_WORKERS 64

#ifdef __cplusplus
extern "C" {
#endif

// the worker that owns `layer` when `n_workers` share a model
int llama_layer_owner(int layer, int n_workers);

int llama_n_layers(void);

const char * llama_version(void);

#ifdef __cplusplus
}
#endif
