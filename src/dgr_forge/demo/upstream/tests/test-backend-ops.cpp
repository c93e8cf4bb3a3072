// test-backend-ops (demo): mode `test` in llama.cpp's console format
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ggml-ops.h"

static const char * NAMES[GGML_OP_COUNT] = { "ADD", "MUL", "SCALE", "RMS_NORM" };

static double reference(int op, const float * a, const float * b, int n, int i) {
    double sum = 0.0;
    for (int k = 0; k < n; k++) {
        sum += (double) a[k] * a[k];
    }
    switch (op) {
        case GGML_OP_ADD:      return (double) a[i] + b[i];
        case GGML_OP_MUL:      return (double) a[i] * b[i];
        case GGML_OP_SCALE:    return a[i] * 0.25;
        case GGML_OP_RMS_NORM: return a[i] / std::sqrt(sum / n + 1e-6);
    }
    return 0.0;
}

// `-o A,B`: the op names it keeps (none given: all)
static bool wanted(const char * filter, const char * name) {
    if (filter == nullptr) {
        return true;
    }
    char list[1024], item[64];
    snprintf(list, sizeof list, ",%s,", filter);
    snprintf(item, sizeof item, ",%s,", name);
    return strstr(list, item) != nullptr;
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
            float * a = (float *) malloc(sizeof(float) * 3 * n), * b = a + n, * out = b + n;
            if (a == nullptr) {
                return 1;
            }
            for (int i = 0; i < n; i++) {
                seed = seed * 1664525u + 1013904223u;
                a[i] = (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
                seed = seed * 1664525u + 1013904223u;
                b[i] = (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
            }
            ggml_op_compute(op, a, b, out, n);
            double err = 0.0, norm = 0.0;
            for (int i = 0; i < n; i++) {
                const double want = reference(op, a, b, n, i);
                err += (want - out[i]) * (want - out[i]);
                norm += want * want;
            }
            free(a);
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
