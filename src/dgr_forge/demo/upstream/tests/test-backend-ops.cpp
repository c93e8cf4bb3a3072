// test-backend-ops (demo): mode `test` in llama.cpp's console format
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
