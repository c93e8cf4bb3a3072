#include <cstdio>
#include <dgr_build_info.h>
#include "llama.h"

// LLAMA_MAX_WORKERS comes from patch 0002, round-robin ownership from patch 0001
int main() {
    std::printf("shard-worker: layer 7 of %d -> worker %d of 4 (at most %d workers)\n",
                llama_n_layers(), llama_layer_owner(7, 4), LLAMA_MAX_WORKERS);
    std::printf("built from %s %s + %d patches, lane %s\n", DGR_UPSTREAM_NAME,
                DGR_UPSTREAM_COMMIT, DGR_PATCH_COUNT, DGR_LANE);
    return 0;
}
