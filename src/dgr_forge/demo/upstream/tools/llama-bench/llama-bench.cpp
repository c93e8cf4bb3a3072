// llama-bench (demo): llama.cpp's `-o json` objects, speeds measured
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "gguf-size.h"
#include "llama.h"

// one token's work: a pass over the model's layers
static unsigned decode(int n_tokens) {
    volatile unsigned acc = 0;
    for (int t = 0; t < n_tokens; t++) {
        for (int layer = 0; layer < llama_n_layers(); layer++) {
            for (unsigned i = 0; i < 64; i++) {
                acc = acc * 1664525u + 1013904223u + (unsigned) layer;
            }
        }
    }
    return acc;
}

int main(int argc, char ** argv) {
    const char * model = nullptr;
    int n_prompt = 512, n_gen = 128, reps = 5;
    const char * output = "md";
    for (int i = 1; i < argc; i++) {
        const bool more = i + 1 < argc;
        if (strcmp(argv[i], "-m") == 0 && more) { model = argv[++i]; }
        else if (strcmp(argv[i], "-p") == 0 && more) { n_prompt = atoi(argv[++i]); }
        else if (strcmp(argv[i], "-n") == 0 && more) { n_gen = atoi(argv[++i]); }
        else if (strcmp(argv[i], "-t") == 0 && more) { ++i; }
        else if (strcmp(argv[i], "-r") == 0 && more) { reps = atoi(argv[++i]); }
        else if (strcmp(argv[i], "-o") == 0 && more) { output = argv[++i]; }
        else {
            fprintf(stderr, "error: invalid parameter for argument: %s\n", argv[i]);
            return 1;
        }
    }
    FILE * f = model ? fopen(model, "rb") : nullptr;
    char magic[4] = {0};
    if (f == nullptr || fread(magic, 1, 4, f) != 4 || memcmp(magic, "GGUF", 4) != 0) {
        fprintf(stderr, "main: error: failed to load model '%s'\n", model ? model : "");
        return 1;
    }
    fclose(f);
    const long long model_size = llama_model_bytes(model);  // as llama_model_size()
    if (reps < 1) { reps = 1; }
    if (strcmp(output, "json") != 0) {
        fprintf(stderr, "error: the demo's llama-bench writes -o json only\n");
        return 1;
    }
    const int tests[2][2] = { {n_prompt, 0}, {0, n_gen} };
    printf("[\n");
    bool first = true;
    for (const auto & t : tests) {
        const int n = t[0] + t[1];
        if (n <= 0) { continue; }
        decode(n);  // warmup, as llama-bench does
        double * ts = (double *) malloc(sizeof(double) * reps);
        if (ts == nullptr) { return 1; }
        for (int r = 0; r < reps; r++) {
            timespec t0, t1;  // steady, as llama-bench's std::chrono::steady_clock
            clock_gettime(CLOCK_MONOTONIC, &t0);
            decode(n);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (double) (t1.tv_nsec - t0.tv_nsec);
            ts[r] = 1e9 * n / (ns > 0 ? ns : 1);
        }
        double avg = 0, dev = 0;
        for (int r = 0; r < reps; r++) { avg += ts[r]; }
        avg /= reps;
        for (int r = 0; r < reps; r++) { dev += (ts[r] - avg) * (ts[r] - avg); }
        free(ts);
        dev = reps > 1 ? std::sqrt(dev / (reps - 1)) : 0;
        printf("%s  {\n", first ? "" : ",\n");
        first = false;
        printf("    \"build_commit\": \"%s\",\n", llama_version());
        printf("    \"backends\": \"CPU\",\n");
        printf("    \"model_type\": \"llama demo F32\",\n");
        printf("    \"model_size\": %lld,\n", model_size);
        printf("    \"n_prompt\": %d,\n    \"n_gen\": %d,\n", t[0], t[1]);
        printf("    \"avg_ts\": %.6f,\n    \"stddev_ts\": %.6f\n  }", avg, dev);
    }
    printf("\n]\n");
    return 0;
}
