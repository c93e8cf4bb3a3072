#include "llama.h"

int llama_layer_owner(int layer, int n_workers) {
    return n_workers > 0 ? layer % n_workers : 0;
}

int llama_n_layers(void) {
    return 32;
}

const char * llama_version(void) {
    return "demo-1";
}
