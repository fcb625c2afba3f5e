/* Token shards: the on-disk format of every token stream phaselab trains or evaluates on.
 *
 * Layout (little-endian): a 1024-byte header, then n_tokens uint32 tokens.
 *   bytes 0-7    magic "PHLTOKv1"
 *   bytes 8-11   u32 header size (1024)
 *   bytes 12-15  u32 bytes per token (4)
 *   bytes 16-19  u32 vocabulary size
 *   bytes 20-23  u32 end-of-text id
 *   bytes 24-31  u64 n_tokens
 *   bytes 32-95  tokenizer fingerprint, ASCII, NUL-padded (sha256 hex of tokenizer.json, or a
 *                name such as "bytes" or "synthetic")
 *   bytes 96-1023 zero
 * Documents are separated by the end-of-text id and keep their input order.
 * Readers memory-map the tokens (64-bit offsets throughout: shards of many GB work); a shard
 * truncated in place while mapped is reported as an error, not a SIGBUS. */
#ifndef PHASELAB_SHARD_H
#define PHASELAB_SHARD_H
#include <stdint.h>
#include <stddef.h>

#define SHARD_MAGIC "PHLTOKv1"
#define SHARD_HEADER_BYTES 1024
#define SHARD_FINGERPRINT_BYTES 64

typedef struct {
    char path[1024];
    uint32_t vocab_size;           /* vocabulary size recorded by the writer */
    uint32_t eot_id;
    uint64_t n_tokens;
    char fingerprint[SHARD_FINGERPRINT_BYTES + 1];
    const uint32_t *tokens;        /* [n_tokens], memory-mapped, read-only */
    void *map;                     /* whole-file mapping (NULL for an empty shard) */
    size_t map_bytes;
    int fd;
} Shard;

/* Opens and validates the header and the file length (names the file and byte offset of what
 * is wrong). Does not scan the tokens; see shard_check_tokens. */
int shard_open(Shard *s, const char *path, char *err);
/* Checks tokens [begin, end) against vocab_limit (the model's vocabulary): the first token
 * >= vocab_limit is reported with the file and its byte offset. */
int shard_check_tokens(const Shard *s, uint64_t begin, uint64_t end, uint32_t vocab_limit, char *err);
/* Copies tokens [begin, end) into out [end - begin] and checks them as shard_check_tokens does.
 * Both report a file truncated in place while mapped (which would otherwise be a SIGBUS). */
int shard_read_tokens(const Shard *s, uint64_t begin, uint64_t end, uint32_t vocab_limit, uint32_t *out,
                      char *err);
void shard_close(Shard *s);

/* Writer: streams tokens to PATH.tmp, then on close patches n_tokens into the header, fsyncs
 * and renames to PATH (a killed writer never leaves a file that looks complete). */
typedef struct ShardWriter ShardWriter;
ShardWriter *shard_writer_open(const char *path, uint32_t vocab_size, uint32_t eot_id,
                               const char *fingerprint, char *err);
int shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n, char *err);
uint64_t shard_writer_count(const ShardWriter *w);
int shard_writer_close(ShardWriter *w, char *err);
void shard_writer_abort(ShardWriter *w);   /* removes PATH.tmp */
#endif
