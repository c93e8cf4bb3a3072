// a (split) GGUF model's tensor bytes, as llama_model_size() counts them
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
