/* SHA-256 (FIPS 180-4, common/sha256.c): the hex digest of a byte string or of a whole file.
 * Used for the tokenizer fingerprint in shard headers, the loader's vocabulary fingerprint
 * and the checksums of checkpoint files. hex receives 64 lowercase characters and a NUL. */
#ifndef PHASELAB_SHA256_H
#define PHASELAB_SHA256_H
#include <stddef.h>
#include <stdint.h>

void sha256_hex(const void *data, size_t len, char hex[65]);
/* The same digest fed in pieces (no buffer of the whole text): init, update ..., final_hex. */
typedef struct {
    uint32_t h[8];
    uint8_t block[64];
    size_t fill;
    uint64_t total;
} Sha256;
void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t len);
void sha256_final_hex(Sha256 *s, char hex[65]);
/* 0, or -1 with err (ERR_LEN bytes, common/errors.h) naming the file. */
int sha256_file_hex(const char *path, char hex[65], char *err);
#endif
