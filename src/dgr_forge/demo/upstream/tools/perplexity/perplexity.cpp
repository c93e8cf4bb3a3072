// llama-perplexity (demo): llama.cpp's lines, one byte a token
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
    FILE * f = llama_model_bytes(model) < 0 ? nullptr : fopen(file, "rb");
    char * text = nullptr;
    long size = 0;
    if (f != nullptr && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && size < (1L << 30)) {
        text = (char *) malloc((size_t) size);
        rewind(f);
        size = text != nullptr ? (long) fread(text, 1, (size_t) size, f) : 0;
    }
    if (f == nullptr || n_ctx < 4 || size < 2L * n_ctx) {
        fprintf(stderr, "perplexity: no model, or under %d tokens in '%s'\n", 2 * n_ctx,
                file);
        return 1;
    }
    int chunks = (int) (size / n_ctx), count = 0;
    chunks = n_chunks < 0 || n_chunks > chunks ? chunks : n_chunks;
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
