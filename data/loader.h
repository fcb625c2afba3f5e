/* Datasets of token shards, cut into windows of T+1 tokens: the stateless training loader and
 * the validation set of docs/spec.md §3.2.
 *
 * Windows. In a shard of n tokens, window k covers tokens [kT, kT+T] (inputs kT..kT+T-1,
 * targets kT+1..kT+T) for k = 0, 1, ... while kT + T < n, i.e. floor((n-1)/T) windows
 * (none when n <= T). Consecutive windows share one boundary token; a window never spans two
 * files. A dataset is a glob of shards sorted by path (strcmp, independent of the locale);
 * its window list is the concatenation of the files' windows in that order.
 *
 * Training order. Global sample number g maps to epoch e = g / N and index i = g % N
 * (N = number of windows); the window read is loader_permute(N, seed, e, i), a keyed Feistel
 * permutation of [0, N) with cycle-walking: every window exactly once per epoch, a different
 * order per (seed, epoch), O(1) memory. The loader keeps no position: the trainer hands out
 * sample numbers (step * global_batch + i), so a checkpoint stores one counter.
 *
 * Every sample's tokens are checked against the model's vocabulary (vocab_limit); a bad
 * token is reported with the file and its byte offset. Shards are memory-mapped and their
 * file descriptors closed at open, so thousands of shards cost mappings, not descriptors.
 * All functions taking a const loader or set are safe to call from several threads. */
#ifndef PHASELAB_LOADER_H
#define PHASELAB_LOADER_H
#include <stdint.h>

#define LOADER_FINGERPRINT_LEN 64      /* hex sha256, plus a NUL in the caller's buffer */

/* Windows of a shard of n_tokens tokens with sequence length T: floor((n-1)/T), 0 if n <= T. */
uint64_t loader_windows_in_file(uint64_t n_tokens, int T);

/* The position of index (0 <= index < n) in the order of epoch `epoch`: a bijection of [0, n)
 * for every (seed, epoch). Feistel network over the smallest even bit width covering n, six
 * keyed rounds, cycle-walking until the result is < n (fewer than 4 steps on average). */
uint64_t loader_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t index);

/* ------------------------------------------------------------------- training loader */
typedef struct TrainLoader TrainLoader;

/* Opens every shard matching glob (error naming the glob if none does, or if together they
 * hold no window of T+1 tokens). Shards must share one tokenizer fingerprint. vocab_limit is
 * the model's vocabulary size (at most 2^31, tokens are returned as int32). */
int train_loader_open(TrainLoader **L, const char *glob, int T, uint32_t vocab_limit,
                      uint64_t seed, char *err);
uint64_t train_loader_n_windows(const TrainLoader *L);
int train_loader_n_files(const TrainLoader *L);
/* Tokenizer fingerprint shared by the shards (header bytes 32-95). */
const char *train_loader_tokenizer(const TrainLoader *L);
/* The window global sample number g reads: loader_permute(N, seed, g / N, g % N). */
uint64_t train_loader_sample_window(const TrainLoader *L, uint64_t sample_number);
/* Writes the T+1 tokens of global sample number g into out [T+1]. */
int train_loader_sample(const TrainLoader *L, uint64_t sample_number, int32_t *out, char *err);
/* Window w of the (unshuffled) window list, into out [T+1]. */
int train_loader_window(const TrainLoader *L, uint64_t window, int32_t *out, char *err);
/* Which file and first token a window starts at (for logs and error messages). */
void train_loader_locate(const TrainLoader *L, uint64_t window, const char **path,
                         uint64_t *first_token);
/* Fingerprint of the dataset for resume checks: hex sha256 over, per file in order, its base
 * name, its n_tokens and its tokenizer fingerprint. Independent of the directory (a moved
 * dataset still matches), of T and of the seed (those are in the config). */
void train_loader_fingerprint(const TrainLoader *L, char out[LOADER_FINGERPRINT_LEN + 1]);
void train_loader_close(TrainLoader *L);

/* ---------------------------------------------------------------- validation set */
typedef struct ValSet ValSet;

/* The first max_windows windows (= floor(eval.val_tokens / T); negative = all) taken file by
 * file in path order. Error when the glob matches nothing, or when there is not even one
 * window (names the glob, the token count and T). The tokens of the windows used are checked
 * against vocab_limit here, once. */
int val_set_open(ValSet **V, const char *glob, int T, uint32_t vocab_limit, long max_windows,
                 char *err);
long val_set_n_windows(const ValSet *V);
/* The glob the set was opened with, and the tokenizer fingerprint its shards share. */
const char *val_set_glob(const ValSet *V);
const char *val_set_tokenizer(const ValSet *V);
/* Window k (0 <= k < n_windows) into out [T+1]. */
int val_set_window(const ValSet *V, long k, int32_t *out, char *err);
void val_set_close(ValSet *V);
#endif
