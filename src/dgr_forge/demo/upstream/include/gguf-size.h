// a (split) GGUF model's tensor bytes, as llama_model_size() counts them
// (F32 and F16 tensors: the stand-ins' models)
#pragma once
// (C headers only: this is compiled into every stand-in, in every test build)
#include <cstdint>
#include <cstdio>
#include <cstring>

static long long gguf_file_bytes(const char * path, int & splits) {
    FILE * f = fopen(path, "rb");
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
        char key[4096] = {0};
        ok = rd(&len, 8) && len < sizeof key;
        if (ok) { ok = rd(key, len) && rd(&type, 4) && type < 13; }
        v = 0;
        if (ok && type == 8) { ok = rd(&len, 8) && !fseek(f, (long) len, SEEK_CUR); }
        else if (ok) { ok = type != 9 && rd(&v, size[type]); }
        if (ok && strcmp(key, "split.count") == 0) { splits = (int) v; }
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
    const char * at = nullptr;  // the last "-00001-of-"
    for (const char * s = strstr(path, "-00001-of-"); s != nullptr; s = strstr(s + 1, "-00001-of-")) {
        at = s;
    }
    for (int k = 2; total >= 0 && k <= splits && at != nullptr; k++) {
        char other[4096];
        snprintf(other, sizeof other, "%.*s-%05d-of-%s", (int) (at - path), path, k, at + 10);
        const long long more = gguf_file_bytes(other, ignored);
        total = more < 0 ? -1 : total + more;
    }
    return total;
}
