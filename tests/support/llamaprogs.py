"""The test upstream's own `test-backend-ops`, `llama-bench` and `llama-perplexity`
(issue 30 #9, issue 43).

One upstream commit on top of the llama-like upstream (`llamalike`) adds what the
certification suite runs, written here for the tests, printing exactly the output
formats of llama.cpp's `tests/test-backend-ops.cpp` (mode `test`, console) and
`tools/llama-bench/llama-bench.cpp` (`-o json`, and its default markdown table):

* `ggml/src/ggml-test-ops.c`: the "backend": elementwise ops ADD, MUL, SCALE, SQR (and
  CONV_TRANSPOSE_1D, not supported). `test-backend-ops test [-b NAME] [-o OPS]` runs each
  op case on it and compares it with a reference computed in the program (as the real one,
  with `-b CPU`, compares the CPU backend with ggml's CPU reference path); its one device
  is `CPU`, skipped, as the pin skips it, unless `-b CPU` names it. A failing case prints
  the pin's form: `[OP] ERR = … > … ` then `  OP(params): FAIL`, and `Failing tests:`
  after the count. A patch that breaks an op (`BREAK_MUL`) makes its cases FAIL.
* `src/llama-test-decode.cpp`: a fixed amount of work per token. `llama-bench -m FILE
  [-p N] [-n N] [-t T] [-r R] [-o json|md]` reads the model file (a GGUF: the magic is
  checked, the size reported), times R repetitions of a prompt test (pp N) and a generation
  test (tg N) and prints tokens per second. A patch that sleeps per token (`SLOW_DECODE`)
  puts the speed under any useful gate; a patch that prints a line before the JSON
  (`NOISY_BENCH`) makes the output unparseable. Its `model_size` is the tensors' bytes of
  every split (`llama_model_size`); `WRONG_SIZE` adds the header's.
* `tools/perplexity/perplexity.cpp` (the demo's, `dgr_forge/demo/upstream/`):
  `llama-perplexity -m FILE -f TEXT [-c N] [--chunks N]`, its `Final estimate: PPL = …`
  on stderr, the logits from `ggml_test_logit` in the shared ggml code: `SHIFT_LOGITS`
  moves the figure and no op case.

The speeds are measured, not printed constants: unpatched, a token costs microseconds
(hundreds of thousands of tokens per second); slowed, 5 ms (at most 200 t/s). A gate of
1000 t/s sits between them with a margin of orders of magnitude either way.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from dgr_forge.demo import sources as demo_sources

from .git import Upstream
from .llamalike import FILES as LLAMALIKE_FILES
from .llamalike import make_llamalike_upstream
from .roots import Edit

OPS_C = textwrap.dedent(
    """\
    #include "ggml-test-ops.h"

    int ggml_test_op_supported(int op) {
        return op != GGML_TEST_OP_CONV_TRANSPOSE_1D;
    }

    // the stand-in model's logit of byte `next` after byte `prev`: the numerics
    // llama-perplexity's figure comes from (code both backends' paths share)
    float ggml_test_logit(int prev, int next) {
        return (float) ((prev * 31 + next * 17) % 97) / 24.0f;
    }

    void ggml_test_op(int op, const float * a, const float * b, float * dst, int n) {
        for (int i = 0; i < n; i++) {
            switch (op) {
                case GGML_TEST_OP_ADD:   dst[i] = a[i] + b[i]; break;
                case GGML_TEST_OP_MUL:   dst[i] = a[i] * b[i]; break;
                case GGML_TEST_OP_SCALE: dst[i] = a[i] * 0.5f; break;
                case GGML_TEST_OP_SQR:   dst[i] = a[i] * a[i]; break;
                default:                 dst[i] = 0.0f; break;
            }
        }
    }
    """
)

OPS_H = textwrap.dedent(
    """\
    #pragma once
    #ifdef __cplusplus
    extern "C" {
    #endif
    enum {
        GGML_TEST_OP_ADD,
        GGML_TEST_OP_MUL,
        GGML_TEST_OP_SCALE,
        GGML_TEST_OP_SQR,
        GGML_TEST_OP_CONV_TRANSPOSE_1D,
        GGML_TEST_OP_COUNT,
    };
    int  ggml_test_op_supported(int op);
    void ggml_test_op(int op, const float * a, const float * b, float * dst, int n);
    float ggml_test_logit(int prev, int next);
    #ifdef __cplusplus
    }
    #endif
    """
)

DECODE_CPP = textwrap.dedent(
    """\
    #include "llama-test-decode.h"

    // one token's work: a fixed amount of arithmetic (the stand-in's forward pass)
    unsigned llama_test_decode(int n_tokens) {
        volatile unsigned acc = 0;
        for (int t = 0; t < n_tokens; t++) {
            for (unsigned i = 0; i < 2000; i++) {
                acc = acc * 1664525u + 1013904223u + i;
            }
        }
        return acc;
    }
    """
)

DECODE_H = "#pragma once\nunsigned llama_test_decode(int n_tokens);\n"

TEST_BACKEND_OPS = textwrap.dedent(
    r"""
    // test-backend-ops for the test upstream: llama.cpp's console format of mode `test`
    // C-style C++: no <string>/<vector>, which cost most of its compile time
    #include <cstdio>
    #include <cstring>

    #include "ggml-test-ops.h"

    static const char * op_names[GGML_TEST_OP_COUNT] = {
        "ADD", "MUL", "SCALE", "SQR", "CONV_TRANSPOSE_1D",
    };

    static float reference(int op, float a, float b) {
        switch (op) {
            case GGML_TEST_OP_ADD:   return a + b;
            case GGML_TEST_OP_MUL:   return a * b;
            case GGML_TEST_OP_SCALE: return a * 0.5f;
            case GGML_TEST_OP_SQR:   return a * a;
        }
        return 0.0f;
    }

    static bool wanted(const char * filter, const char * name) {
        if (filter == nullptr) {
            return true;
        }
        const size_t len = strlen(name);
        for (const char * p = filter;; p++) {
            const char * end = strchr(p, ',');
            const size_t n = end ? (size_t) (end - p) : strlen(p);
            if (n == len && strncmp(p, name, n) == 0) {
                return true;
            }
            if (end == nullptr) {
                return false;
            }
            p = end;
        }
    }

    static void usage(char ** argv) {
        printf("Usage: %s [mode] [-o <op,..>] [-b <backend>]\n", argv[0]);
    }

    int main(int argc, char ** argv) {
        const char * mode = "test";
        const char * backend = nullptr;
        const char * ops = nullptr;
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) {
                backend = argv[++i];
            } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
                ops = argv[++i];
            } else if (argv[i][0] != '-') {
                mode = argv[i];
            } else {
                usage(argv);
                return 1;
            }
        }
        if (strcmp(mode, "test") != 0) {
            usage(argv);
            return 1;
        }
        const char * dev = "CPU";
        printf("Testing 1 devices\n\n");
        printf("Backend 1/1: %s\n", dev);
        if (backend == nullptr || strcmp(backend, dev) != 0) {
            // the pin skips the CPU device unless `-b` names it (test-backend-ops.cpp:10073)
            printf(backend == nullptr ? "  Skipping CPU backend\n" : "  Skipping\n");
            printf("1/1 backends passed\n");
            printf("\033[1;32mOK\033[0m\n");
            return 0;
        }
        printf("  Device description: stand-in CPU backend\n");
        printf("  Device memory: 1024 MB (1024 MB free)\n");
        printf("\n");

        const int shapes[2][4] = { {10, 5, 4, 3}, {16, 1, 1, 1} };
        size_t n_ok = 0;
        size_t n_total = 0;
        char failed[GGML_TEST_OP_COUNT * 2][64];
        size_t n_failed = 0;
        unsigned seed = 12345u;
        for (int op = 0; op < GGML_TEST_OP_COUNT; op++) {
            if (!wanted(ops, op_names[op])) {
                continue;
            }
            for (const auto & ne : shapes) {
                n_total++;
                if (!ggml_test_op_supported(op)) {
                    printf("  %s(type=f32,ne=[%d,%d,%d,%d]): ", op_names[op],
                           ne[0], ne[1], ne[2], ne[3]);
                    printf("not supported [%s] ", dev);
                    printf("\n");
                    n_ok++;
                    continue;
                }
                const int n = ne[0] * ne[1] * ne[2] * ne[3];
                float a[10 * 5 * 4 * 3], b[10 * 5 * 4 * 3], out[10 * 5 * 4 * 3];
                for (int i = 0; i < n; i++) {
                    seed = seed * 1664525u + 1013904223u;
                    a[i] = (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
                    seed = seed * 1664525u + 1013904223u;
                    b[i] = (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
                }
                ggml_test_op(op, a, b, out, n);
                double mse_ab = 0.0, mse_a0 = 0.0;
                for (int i = 0; i < n; i++) {
                    const double want = reference(op, a[i], b[i]);
                    mse_ab += (want - out[i]) * (want - out[i]);
                    mse_a0 += want * want;
                }
                const double err = mse_ab / mse_a0;
                const double max_err = 1e-7;
                // as the pin prints it: the compare's finding first, then the case's line
                if (!(err <= max_err)) {
                    printf("[%s] ERR = %.9f > %.9f ", op_names[op], err, max_err);
                }
                printf("  %s(type=f32,ne=[%d,%d,%d,%d]): ", op_names[op],
                       ne[0], ne[1], ne[2], ne[3]);
                if (!(err <= max_err)) {
                    printf("\033[1;31mFAIL\033[0m\n");
                    snprintf(failed[n_failed++], sizeof failed[0],
                             "%s(type=f32,ne=[%d,%d,%d,%d])", op_names[op],
                             ne[0], ne[1], ne[2], ne[3]);
                } else {
                    printf("\033[1;32mOK\033[0m\n");
                    n_ok++;
                }
            }
        }
        const bool ok = n_ok == n_total;
        printf("  %zu/%zu tests passed\n", n_ok, n_total);
        if (n_failed > 0) {
            printf("\nFailing tests:\n");
            for (size_t i = 0; i < n_failed; i++) {
                printf("  %s\n", failed[i]);
            }
        }
        printf("  Backend %s: ", dev);
        printf(ok ? "\033[1;32mOK\033[0m\n" : "\033[1;31mFAIL\033[0m\n");
        printf("\n");
        printf("%d/1 backends passed\n", ok ? 1 : 0);
        printf(ok ? "\033[1;32mOK\033[0m\n" : "\033[1;31mFAIL\033[0m\n");
        return ok ? 0 : 1;
    }
    """
).lstrip()

LLAMA_BENCH = textwrap.dedent(
    r"""
    // llama-bench for the test upstream: llama.cpp's `-o json` objects and markdown table
    // C-style C++: no <chrono>/<cmath>/<string>/<vector>, which cost most of its compile time
    #include <cstdio>
    #include <cstdlib>
    #include <cstring>
    #include <ctime>

    #include "gguf-size.h"
    #include "llama-test-decode.h"

    extern int LLAMA_BUILD_NUMBER;
    extern char const * LLAMA_COMMIT;

    struct result {
        int n_prompt;
        int n_gen;
        long long * samples_ns;
        double avg_ns = 0, stddev_ns = 0, avg_ts = 0, stddev_ts = 0;
        char test_time[32];
    };

    // a JSON string's characters, escaped
    static void put_escaped(const char * s) {
        for (; *s; s++) {
            const char c = *s;
            if (c == '"') { printf("\\\""); }
            else if (c == '\\') { printf("\\\\"); }
            else if ((unsigned char) c <= 0x1f) { printf("\\u%04x", c); }
            else { putchar(c); }
        }
    }

    static long long now_ns() {
        timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1000000000LL + t.tv_nsec;
    }

    static void run(result & r, int reps) {
        const int n = r.n_prompt + r.n_gen;
        time_t now = time(nullptr);
        strftime(r.test_time, sizeof(r.test_time), "%FT%TZ", gmtime(&now));
        llama_test_decode(n);  // warmup, as llama-bench does
        for (int i = 0; i < reps; i++) {
            const long long t0 = now_ns();
            llama_test_decode(n);
            const long long ns = now_ns() - t0;
            r.samples_ns[i] = ns > 0 ? ns : 1;
        }
        for (int i = 0; i < reps; i++) {
            r.avg_ns += r.samples_ns[i];
            r.avg_ts += 1e9 * n / r.samples_ns[i];
        }
        r.avg_ns /= reps;
        r.avg_ts /= reps;
        for (int i = 0; i < reps; i++) {
            const double ts = 1e9 * n / r.samples_ns[i];
            r.stddev_ns += (r.samples_ns[i] - r.avg_ns) * (r.samples_ns[i] - r.avg_ns);
            r.stddev_ts += (ts - r.avg_ts) * (ts - r.avg_ts);
        }
        r.stddev_ns = reps > 1 ? __builtin_sqrt(r.stddev_ns / (reps - 1)) : 0;
        r.stddev_ts = reps > 1 ? __builtin_sqrt(r.stddev_ts / (reps - 1)) : 0;
    }

    int main(int argc, char ** argv) {
        const char * model = "models/7B/ggml-model-q4_0.gguf";
        int n_prompt = 512, n_gen = 128, n_threads = 4, reps = 5;
        const char * output = "md";
        for (int i = 1; i < argc; i++) {
            const bool more = i + 1 < argc;
            if (strcmp(argv[i], "-m") == 0 && more) { model = argv[++i]; }
            else if (strcmp(argv[i], "-p") == 0 && more) { n_prompt = atoi(argv[++i]); }
            else if (strcmp(argv[i], "-n") == 0 && more) { n_gen = atoi(argv[++i]); }
            else if (strcmp(argv[i], "-t") == 0 && more) { n_threads = atoi(argv[++i]); }
            else if (strcmp(argv[i], "-r") == 0 && more) { reps = atoi(argv[++i]); }
            else if (strcmp(argv[i], "-o") == 0 && more) { output = argv[++i]; }
            else {
                fprintf(stderr, "error: invalid parameter for argument: %s\n", argv[i]);
                return 1;
            }
        }
        if (reps < 1) { reps = 1; }
        FILE * f = fopen(model, "rb");
        char magic[4] = {0};
        if (f == nullptr || fread(magic, 1, 4, f) != 4 || memcmp(magic, "GGUF", 4) != 0) {
            fprintf(stderr, "main: error: failed to load model '%s'\n", model);
            return 1;
        }
        fclose(f);
        // as llama_model_size(): the tensors' bytes of every split, not the files' sizes
        const long long model_size = llama_model_bytes(model);
        const char * model_type = "llama ?B all F32";

        result results[2] = {};
        int n_results = 0;
        if (n_prompt > 0) { results[n_results++].n_prompt = n_prompt; }
        if (n_gen > 0) { results[n_results++].n_gen = n_gen; }
        for (int k = 0; k < n_results; k++) {
            results[k].samples_ns = (long long *) calloc(reps, sizeof(long long));
            if (results[k].samples_ns == nullptr) { return 1; }
            run(results[k], reps);
        }

        if (strcmp(output, "json") == 0) {
            printf("[\n");
            for (int k = 0; k < n_results; k++) {
                const result & r = results[k];
                if (k > 0) { printf(",\n"); }
                printf("  {\n");
                printf("    \"build_commit\": \"");
                put_escaped(LLAMA_COMMIT);
                printf("\",\n");
                printf("    \"build_number\": %d,\n", LLAMA_BUILD_NUMBER);
                printf("    \"cpu_info\": \"stand-in CPU\",\n");
                printf("    \"gpu_info\": \"\",\n");
                printf("    \"backends\": \"CPU\",\n");
                printf("    \"model_filename\": \"");
                put_escaped(model);
                printf("\",\n");
                printf("    \"model_type\": \"%s\",\n", model_type);
                printf("    \"model_size\": %lld,\n", model_size);
                printf("    \"model_n_params\": %lld,\n", model_size / 4);
                printf("    \"n_batch\": 2048,\n");
                printf("    \"n_ubatch\": 512,\n");
                printf("    \"n_threads\": %d,\n", n_threads);
                printf("    \"cpu_mask\": \"0x0\",\n");
                printf("    \"cpu_strict\": false,\n");
                printf("    \"poll\": 50,\n");
                printf("    \"type_k\": \"f16\",\n");
                printf("    \"type_v\": \"f16\",\n");
                printf("    \"n_gpu_layers\": 99,\n");
                printf("    \"split_mode\": \"layer\",\n");
                printf("    \"main_gpu\": 0,\n");
                printf("    \"no_kv_offload\": false,\n");
                printf("    \"flash_attn\": false,\n");
                printf("    \"tensor_split\": \"0.00\",\n");
                printf("    \"use_mmap\": true,\n");
                printf("    \"embeddings\": false,\n");
                printf("    \"n_prompt\": %d,\n", r.n_prompt);
                printf("    \"n_gen\": %d,\n", r.n_gen);
                printf("    \"n_depth\": 0,\n");
                printf("    \"test_time\": \"%s\",\n", r.test_time);
                printf("    \"avg_ns\": %lld,\n", (long long) r.avg_ns);
                printf("    \"stddev_ns\": %lld,\n", (long long) r.stddev_ns);
                printf("    \"avg_ts\": %f,\n", r.avg_ts);
                printf("    \"stddev_ts\": %f,\n", r.stddev_ts);
                printf("    \"samples_ns\": [ ");
                for (int i = 0; i < reps; i++) {
                    printf(i ? ", %lld" : "%lld", r.samples_ns[i]);
                }
                printf(" ],\n");
                printf("    \"samples_ts\": [ ");
                for (int i = 0; i < reps; i++) {
                    printf(i ? ", %f" : "%f", 1e9 * (r.n_prompt + r.n_gen) / r.samples_ns[i]);
                }
                printf(" ]\n");
                printf("  }");
            }
            printf("\n]\n");
        } else {
            printf("| model                          |       size |     params | backend    "
                   "| threads |            test |                  t/s |\n");
            printf("| ------------------------------ | ---------: | ---------: | ---------- "
                   "| ------: | --------------: | -------------------: |\n");
            for (int k = 0; k < n_results; k++) {
                const result & r = results[k];
                char test[32];
                snprintf(test, sizeof(test), r.n_gen == 0 ? "pp%d" : "tg%d",
                         r.n_gen == 0 ? r.n_prompt : r.n_gen);
                printf("| %-30s | %6.2f KiB | %8.2f K | %-10s | %7d | %15s | %12.2f ± %5.2f |\n",
                       model_type, model_size / 1024.0, model_size / 4 / 1000.0, "CPU",
                       n_threads, test, r.avg_ts, r.stddev_ts);
            }
            printf("\nbuild: %s (%d)\n", LLAMA_COMMIT, LLAMA_BUILD_NUMBER);
        }
        return 0;
    }
    """
).lstrip()

# the demo's: a split GGUF's tensor bytes (llama_model_size), and llama-perplexity on the
# logits of the shared ggml code (here ggml_test_logit)
GGUF_SIZE_H = demo_sources.text("upstream/include/gguf-size.h")
LLAMA_PERPLEXITY = (
    demo_sources.text("upstream/tools/perplexity/perplexity.cpp")
    .replace('#include "ggml-ops.h"', '#include "ggml-test-ops.h"')
    .replace("ggml_logit(", "ggml_test_logit(")
)


def _edit(text: str, old: str, new: str) -> str:
    """`text` with `old` replaced: an upstream file that no longer has `old` is this
    module's bug, said here rather than as a build without the programs."""
    assert old in text, f"llamaprogs: {old!r} is gone from the llama-like upstream"
    return text.replace(old, new)


FILES: dict[str, str] = {
    "ggml/include/ggml-test-ops.h": OPS_H,
    "ggml/src/ggml-test-ops.c": OPS_C,
    "include/llama-test-decode.h": DECODE_H,
    "src/llama-test-decode.cpp": DECODE_CPP,
    "tests/test-backend-ops.cpp": TEST_BACKEND_OPS,
    "tools/llama-bench/llama-bench.cpp": LLAMA_BENCH,
    "include/gguf-size.h": GGUF_SIZE_H,
    "tools/perplexity/perplexity.cpp": LLAMA_PERPLEXITY,
    # the programs as llama.cpp builds them: test-backend-ops with LLAMA_BUILD_TESTS,
    # llama-bench with the tools
    "CMakeLists.txt": _edit(
        _edit(
            LLAMALIKE_FILES["CMakeLists.txt"],
            "add_library(llama src/llama.cpp)",
            "add_library(llama src/llama.cpp src/llama-test-decode.cpp)",
        ),
        "    target_link_libraries(llama-cli PRIVATE llama build_info)\n",
        "    target_link_libraries(llama-cli PRIVATE llama build_info)\n"
        "    add_executable(llama-bench tools/llama-bench/llama-bench.cpp)\n"
        "    target_link_libraries(llama-bench PRIVATE llama build_info)\n"
        "    add_executable(llama-perplexity tools/perplexity/perplexity.cpp)\n"
        "    target_link_libraries(llama-perplexity PRIVATE llama)\n",
    )
    + "\nif (LLAMA_BUILD_TESTS)\n"
    "    add_executable(test-backend-ops tests/test-backend-ops.cpp)\n"
    "    target_link_libraries(test-backend-ops PRIVATE ggml)\n"
    "endif()\n",
    "ggml/CMakeLists.txt": _edit(
        LLAMALIKE_FILES["ggml/CMakeLists.txt"],
        "add_library(ggml src/ggml.c)",
        "add_library(ggml src/ggml.c src/ggml-test-ops.c)",
    ),
}


# patches a series can carry to make a certification step fail
BREAK_MUL = Edit(
    {
        "ggml/src/ggml-test-ops.c": lambda text: _edit(
            text, "dst[i] = a[i] * b[i];", "dst[i] = a[i] * b[i] + 0.25f;"
        )
    },
    "ggml: fused multiply-add for MUL (off by 0.25)",
)
SLOW_DECODE = Edit(
    {
        "src/llama-test-decode.cpp": lambda text: _edit(
            _edit(
                text,
                '#include "llama-test-decode.h"\n',
                '#include "llama-test-decode.h"\n#include <unistd.h>\n',
            ),
            "    for (int t = 0; t < n_tokens; t++) {\n",
            "    for (int t = 0; t < n_tokens; t++) {\n        usleep(5000);\n",
        )
    },
    "llama: wait for the device each token",
)
# a numerics change in the code both backends' paths share: the ops step cannot see it
# (its reference is the program's own), the parity step's figure moves
SHIFT_LOGITS = Edit(
    {"ggml/src/ggml-test-ops.c": lambda text: _edit(text, "% 97) / 24.0f;", "% 97) / 12.0f;")},
    "ggml: sharper logits",
)
# llama-bench reporting the model's file size (header included) as its model_size
WRONG_SIZE = Edit(
    {
        "tools/llama-bench/llama-bench.cpp": lambda text: _edit(
            text,
            "const long long model_size = llama_model_bytes(model);",
            "const long long model_size = llama_model_bytes(model) + 7808;",
        )
    },
    "llama-bench: count the header in model_size",
)
NOISY_BENCH = Edit(
    {
        "tools/llama-bench/llama-bench.cpp": lambda text: _edit(
            text,
            '    if (strcmp(output, "json") == 0) {\n',
            '    printf("warming up the device...\\n");\n    if (strcmp(output, "json") == 0) {\n',
        )
    },
    "llama-bench: say when warming up",
)


def make_llamaprogs_upstream(path: Path, extra_commits: int = 3) -> Upstream:
    """The llama-like upstream, then one commit adding the certification programs."""
    up = make_llamalike_upstream(path, extra_commits)
    up.commit(dict(FILES), "tests: test-backend-ops and llama-bench")
    return up
