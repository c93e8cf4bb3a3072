"""The demo upstream's `test-backend-ops`, `llama-bench` and `llama-perplexity`: small,
printing the real formats.

They stand in for llama.cpp's `tests/test-backend-ops.cpp` (mode `test`, console output:
`Backend 1/1: CPU`, one `  OP(params): OK` line per case, a failing case's
`[OP] ERR = … > … ` before it, `  N/M tests passed`, `  Backend CPU: OK`, `1/1 backends
passed`) and `tools/llama-bench/llama-bench.cpp` (`-o json`: one object per test with
`n_prompt`, `n_gen`, `avg_ts`, `stddev_ts`, `backends`, `model_type`, `model_size`: the
tensors' bytes of every split, as `llama_model_size`) and `tools/perplexity/perplexity.cpp`
(`Final estimate: PPL = … +/- …` on stderr, one byte a token, the logits from the library's
`ggml_logit`), the forms `certify/parsers.py` reads. The ops run in the upstream's library
(`src/ggml-ops.cpp`) and are compared with a reference computed in the program; the speeds
are measured. `GGUF_SIZE_H` and `LLAMA_PERPLEXITY` serve the tests' upstream too.
"""

from __future__ import annotations

OPS_H = """\
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
"""

OPS_CPP = """\
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
"""

TEST_BACKEND_OPS = r"""// test-backend-ops (demo): mode `test` in llama.cpp's console format
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-ops.h"

static const char * NAMES[GGML_OP_COUNT] = { "ADD", "MUL", "SCALE", "RMS_NORM" };

static double reference(int op, const std::vector<float> & a, const std::vector<float> & b, int i) {
    double sum = 0.0;
    for (float x : a) {
        sum += (double) x * x;
    }
    switch (op) {
        case GGML_OP_ADD:      return (double) a[i] + b[i];
        case GGML_OP_MUL:      return (double) a[i] * b[i];
        case GGML_OP_SCALE:    return a[i] * 0.25;
        case GGML_OP_RMS_NORM: return a[i] / std::sqrt(sum / a.size() + 1e-6);
    }
    return 0.0;
}

// `-o A,B`: the op names it keeps (none given: all)
static bool wanted(const char * filter, const char * name) {
    if (filter == nullptr) {
        return true;
    }
    const std::string list = std::string(",") + filter + ",";
    return list.find(std::string(",") + name + ",") != std::string::npos;
}

int main(int argc, char ** argv) {
    const char * backend = nullptr;
    const char * ops = nullptr;
    const char * mode = "test";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) {
            backend = argv[++i];
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            ops = argv[++i];
        } else if (argv[i][0] != '-') {
            mode = argv[i];
        } else {
            printf("Usage: %s [mode] [-o <op,..>] [-b <backend>]\n", argv[0]);
            return 1;
        }
    }
    if (strcmp(mode, "test") != 0) {
        printf("Usage: %s [mode] [-o <op,..>] [-b <backend>]\n", argv[0]);
        return 1;
    }
    printf("Testing 1 devices\n\n");
    printf("Backend 1/1: CPU\n");
    if (backend == nullptr || strcmp(backend, "CPU") != 0) {
        // as llama.cpp: the CPU device is skipped unless `-b CPU` names it
        printf("  Skipping CPU backend\n");
        printf("1/1 backends passed\nOK\n");
        return 0;
    }
    printf("  Device description: demo CPU backend\n\n");
    const int shapes[2][4] = { {10, 5, 4, 3}, {64, 1, 1, 1} };
    size_t n_ok = 0, n_total = 0;
    unsigned seed = 42u;
    for (int op = 0; op < GGML_OP_COUNT; op++) {
        if (!wanted(ops, NAMES[op])) {
            continue;
        }
        for (const auto & ne : shapes) {
            const int n = ne[0] * ne[1] * ne[2] * ne[3];
            std::vector<float> a(n), b(n), out(n);
            for (int i = 0; i < n; i++) {
                seed = seed * 1664525u + 1013904223u;
                a[i] = (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
                seed = seed * 1664525u + 1013904223u;
                b[i] = (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
            }
            ggml_op_compute(op, a.data(), b.data(), out.data(), n);
            double err = 0.0, norm = 0.0;
            for (int i = 0; i < n; i++) {
                const double want = reference(op, a, b, i);
                err += (want - out[i]) * (want - out[i]);
                norm += want * want;
            }
            const double nmse = err / norm, max_nmse = 1e-7;
            n_total++;
            const bool ok = nmse <= max_nmse;
            if (!ok) {
                printf("[%s] ERR = %.9f > %.9f ", NAMES[op], nmse, max_nmse);
            }
            printf("  %s(type=f32,ne=[%d,%d,%d,%d]): %s\n", NAMES[op], ne[0], ne[1], ne[2], ne[3],
                   ok ? "OK" : "FAIL");
            n_ok += ok;
        }
    }
    const bool ok = n_ok == n_total;
    printf("  %zu/%zu tests passed\n", n_ok, n_total);
    printf("  Backend CPU: %s\n\n", ok ? "OK" : "FAIL");
    printf("%d/1 backends passed\n%s\n", ok ? 1 : 0, ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
"""

LLAMA_BENCH = r"""// llama-bench (demo): llama.cpp's `-o json` objects, speeds measured
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
    std::string output = "md";
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
    if (output != "json") {
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
        std::vector<double> ts;
        for (int r = 0; r < reps; r++) {
            const auto t0 = std::chrono::steady_clock::now();
            decode(n);
            const auto t1 = std::chrono::steady_clock::now();
            const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
            ts.push_back(1e9 * n / (ns > 0 ? ns : 1));
        }
        double avg = 0, dev = 0;
        for (double x : ts) { avg += x; }
        avg /= reps;
        for (double x : ts) { dev += (x - avg) * (x - avg); }
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
"""

GGUF_SIZE_H = r"""// a (split) GGUF model's tensor bytes, as llama_model_size() counts them
// (F32 and F16 tensors: the stand-ins' models)
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

static long long gguf_file_bytes(const std::string & path, int & splits) {
    FILE * f = fopen(path.c_str(), "rb");
    if (f == nullptr) { return -1; }
    auto rd = [&](void * p, size_t n) { return fread(p, 1, n, f) == n; };
    static const int size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    char magic[4];
    uint32_t version, type, n_dims;
    uint64_t n_t, n_kv, len, v, ne;
    long long total = 0;
    bool ok = rd(magic, 4) && !memcmp(magic, "GGUF", 4) && rd(&version, 4) && rd(&n_t, 8)
              && rd(&n_kv, 8);
    for (uint64_t i = 0; ok && i < n_kv; i++) {  // scalars and strings (no arrays here)
        std::string key;
        ok = rd(&len, 8) && len < 4096;
        if (ok) { key.resize(len); ok = rd(&key[0], len) && rd(&type, 4) && type < 13; }
        v = 0;
        if (ok && type == 8) { ok = rd(&len, 8) && !fseek(f, (long) len, SEEK_CUR); }
        else if (ok) { ok = type != 9 && rd(&v, size[type]); }
        if (ok && key == "split.count") { splits = (int) v; }
    }
    for (uint64_t i = 0; ok && i < n_t; i++) {
        long long n = 1;
        ok = rd(&len, 8) && !fseek(f, (long) len, SEEK_CUR) && rd(&n_dims, 4) && n_dims <= 4;
        for (uint32_t d = 0; ok && d < n_dims; d++) { ok = rd(&ne, 8); n *= (long long) ne; }
        ok = ok && rd(&type, 4) && type <= 1 && rd(&v, 8);
        total += n * (type == 0 ? 4 : 2);
    }
    fclose(f);
    return ok ? total : -1;
}

// `path`, and when it is part 1 of a split (`-00001-of-`) every other part
static long long llama_model_bytes(const char * path) {
    int splits = 1, ignored = 1;
    long long total = gguf_file_bytes(path, splits);
    const std::string p(path);
    const size_t at = p.rfind("-00001-of-");
    for (int k = 2; total >= 0 && k <= splits && at != std::string::npos; k++) {
        char part[16];
        snprintf(part, sizeof part, "-%05d-of-", k);
        const std::string other = p.substr(0, at) + part + p.substr(at + 10);
        const long long more = gguf_file_bytes(other, ignored);
        total = more < 0 ? -1 : total + more;
    }
    return total;
}
"""

LLAMA_PERPLEXITY = r"""// llama-perplexity (demo): llama.cpp's lines, one byte a token
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ggml-ops.h"
#include "gguf-size.h"

int main(int argc, char ** argv) {
    const char * model = "", * file = "";
    int n_ctx = 512, n_chunks = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-m") == 0) { model = argv[i + 1]; }
        else if (strcmp(argv[i], "-f") == 0) { file = argv[i + 1]; }
        else if (strcmp(argv[i], "-c") == 0) { n_ctx = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "--chunks") == 0) { n_chunks = atoi(argv[i + 1]); }
    }
    std::string text;
    FILE * f = llama_model_bytes(model) < 0 ? nullptr : fopen(file, "rb");
    for (int c; f != nullptr && (c = fgetc(f)) != EOF;) { text += (char) c; }
    if (f == nullptr || n_ctx < 4 || (int) text.size() < 2 * n_ctx) {
        fprintf(stderr, "perplexity: no model, or under %d tokens in '%s'\n", 2 * n_ctx,
                file);
        return 1;
    }
    int chunks = (int) text.size() / n_ctx, count = 0;
    chunks = n_chunks < 0 ? chunks : std::min(n_chunks, chunks);
    // LOG_INF's prefix, as common_init turns it on: `M.ss.mmm.uuu I ` (a fixed clock here)
    fprintf(stderr, "0.00.000.100 I perplexity: calculating perplexity over %d chunks, n_ctx=%d\n",
            chunks, n_ctx);
    double nll = 0.0, nll2 = 0.0;
    for (int c = 0; c < chunks; c++) {
        for (int i = c * n_ctx + n_ctx / 2; i < (c + 1) * n_ctx - 1; i++) {
            const int prev = (unsigned char) text[i], next = (unsigned char) text[i + 1];
            double sum = 0.0;
            for (int v = 0; v < 256; v++) { sum += std::exp((double) ggml_logit(prev, v)); }
            const double lp = ggml_logit(prev, next) - std::log(sum);
            nll -= lp;
            nll2 += lp * lp;
            count++;
        }
        printf("[%d]%.4lf,", c + 1, std::exp(nll / count));
    }
    printf("\n");
    nll2 = nll2 / count - (nll / count) * (nll / count);
    const double ppl = std::exp(nll / count);
    const double err = std::sqrt(nll2 / (count - 1)) * ppl;
    fprintf(stderr, "0.00.000.200 I Final estimate: PPL = %.4lf +/- %.5lf\n", ppl, err);
    return 0;
}
"""

CMAKE = """
# the certification's programs: test-backend-ops with the tests, as llama.cpp builds it;
# llama-bench and llama-perplexity too (llama.cpp builds them with the tools, which a
# worker build turns off)
if (LLAMA_BUILD_TESTS)
    add_executable(test-backend-ops tests/test-backend-ops.cpp)
    target_link_libraries(test-backend-ops PRIVATE llama)
    add_executable(llama-bench tools/llama-bench/llama-bench.cpp)
    target_link_libraries(llama-bench PRIVATE llama)
    add_executable(llama-perplexity tools/perplexity/perplexity.cpp)
    target_link_libraries(llama-perplexity PRIVATE llama)
endif()
"""

FILES = {
    "include/ggml-ops.h": OPS_H,
    "src/ggml-ops.cpp": OPS_CPP,
    "tests/test-backend-ops.cpp": TEST_BACKEND_OPS,
    "tools/llama-bench/llama-bench.cpp": LLAMA_BENCH,
    "include/gguf-size.h": GGUF_SIZE_H,
    "tools/perplexity/perplexity.cpp": LLAMA_PERPLEXITY,
}
