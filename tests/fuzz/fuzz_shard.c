/* libFuzzer harness: token shard files (data/shard.c, format in data/shard.h) and the loaders
 * that read them (data/loader.c).
 *
 * Input: a whole shard file (1024-byte header + tokens). It is opened with shard_open; a shard
 * that opens has its tokens checked (shard_check_tokens) and is then read the way training
 * and evaluation read it: train_loader_open + every window (at most 64) with T = 4, and
 * val_set_open + every window, with the vocabulary the header records. Any sanitizer report
 * or crash is a finding; a rejected file is the normal outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "data/loader.h"
#include "data/shard.h"
#include "common/errors.h"
#include "tests/fuzz/fuzz_util.h"

#define T 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("train_000000.bin", data, size);
    char err[ERR_LEN];
    Shard s;
    if (shard_open(&s, path, err) != 0) return 0;
    uint32_t vocab = s.vocab_size > (1u << 31) ? (1u << 31) : s.vocab_size;
    int tokens_ok = shard_check_tokens(&s, 0, s.n_tokens, vocab, err) == 0;
    shard_close(&s);
    if (!tokens_ok) return 0;

    int32_t out[T + 1];
    TrainLoader *L;
    if (train_loader_open(&L, path, T, vocab, 1234, err) == 0) {
        uint64_t n = train_loader_n_windows(L);
        for (uint64_t w = 0; w < n && w < 64; w++) {
            if (train_loader_window(L, w, out, err) != 0) abort();   /* checked tokens: must read */
            if (train_loader_sample(L, w, out, err) != 0) abort();
        }
        char fp[LOADER_FINGERPRINT_LEN + 1];
        train_loader_fingerprint(L, fp);
        train_loader_close(L);
    }
    ValSet *V;
    if (val_set_open(&V, path, T, vocab, 64, err) == 0) {
        for (long k = 0; k < val_set_n_windows(V); k++)
            if (val_set_window(V, k, out, err) != 0) abort();
        val_set_close(V);
    }
    return 0;
}
