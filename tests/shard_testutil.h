/* Token shards written byte by byte for the loader tests (tests/test_loader.c,
 * tests/test_train_stages.c), independently of data/shard.c: the layout of data/shard.h, a 1024-byte
 * header "PHLTOKv1" (header size, 4-byte tokens, vocabulary 2^24, end-of-text 0, n_tokens at
 * byte 24, fingerprint at byte 32), then uint32 tokens. Token i is tok[i], or FILE_ID * 1000 + i
 * when tok is NULL, so every window read names its file and first position. */
#ifndef PHASELAB_TESTS_SHARD_TESTUTIL_H
#define PHASELAB_TESTS_SHARD_TESTUTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }

static void write_shard(const char *path, uint64_t n, uint32_t id, const uint32_t *tok, const char *fp) {
    unsigned char h[1024] = {0};
    memcpy(h, "PHLTOKv1", 8);
    put_u32(h + 8, 1024);
    put_u32(h + 12, 4);
    put_u32(h + 16, 1u << 24);
    put_u32(h + 20, 0);
    put_u32(h + 24, (uint32_t)n);
    memcpy(h + 32, fp, strlen(fp));
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    fwrite(h, 1, 1024, f);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char b[4];
        put_u32(b, tok ? tok[i] : id * 1000 + (uint32_t)i);
        fwrite(b, 1, 4, f);
    }
    fclose(f);
}
#endif
