/* Datasets of token shards cut into windows: the stateless training loader (shuffled by a
 * keyed Feistel permutation per epoch) and the validation set of docs/spec.md §3.2.
 * The window arithmetic and the guarantees are described in data/loader.h.
 *
 * A Dataset is the sorted list of shards of a glob, each memory-mapped (descriptor closed),
 * with the index of its first window in the concatenated window list; locating window w is a
 * binary search over those starts. The permutation: with n windows, let h be the smallest
 * integer with 2^(2h) >= n (h >= 1); split x < 2^(2h) into halves (L, R) of h bits and apply
 * six rounds (L, R) <- (R, L xor F_j(R)), F_j(R) = mix64(R xor K_j) mod 2^h, with round keys
 * K_j derived from (seed, epoch, j). Each round is invertible, so this is a bijection of
 * [0, 2^(2h)); cycle-walking (re-applying it until the value is < n) restricts it to a
 * bijection of [0, n). Since 2^(2h) < 4n, a walk takes fewer than 4 steps on average. */
#include "data/loader.h"
#include "data/shard.h"
#include "common/sha256.h"
#include "common/errors.h"

#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ window arithmetic */

uint64_t loader_windows_in_file(uint64_t n_tokens, int T) {
    return (T > 0 && n_tokens > (uint64_t)T) ? (n_tokens - 1) / (uint64_t)T : 0;
}

/* ------------------------------------------------------------------ permutation */

/* A 64-bit mixing function (the splitmix64 finalizer): every input bit affects every output bit. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

#define FEISTEL_ROUNDS 6

uint64_t loader_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t index) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1);       /* values 0..n-1 need this many bits */
    int h = (bits + 1) / 2;                        /* half width: 2h >= bits */
    uint64_t mask = h >= 64 ? ~0ULL : (1ULL << h) - 1;
    uint64_t keys[FEISTEL_ROUNDS];
    uint64_t epoch_key = mix64(mix64(seed ^ 0x6a09e667f3bcc908ULL) + epoch);
    for (int j = 0; j < FEISTEL_ROUNDS; j++)
        keys[j] = mix64(epoch_key + 0x9e3779b97f4a7c15ULL * (uint64_t)(j + 1));
    uint64_t x = index;
    do {
        uint64_t left = x >> h, right = x & mask;
        for (int j = 0; j < FEISTEL_ROUNDS; j++) {
            uint64_t f = mix64(right ^ keys[j]) & mask;
            uint64_t next_right = left ^ f;
            left = right;
            right = next_right;
        }
        x = left << h | right;
    } while (x >= n);
    return x;
}

/* ------------------------------------------------------------------ datasets */

typedef struct {
    char glob[1024];
    int T;
    uint32_t vocab_limit;
    int n_files;
    Shard *shards;            /* [n_files], sorted by path */
    uint64_t *first_window;   /* [n_files + 1]: window index where each file starts; last = total */
    uint64_t n_windows;
    uint64_t n_tokens;        /* all files together */
} Dataset;

static int compare_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dataset_free(Dataset *d) {
    for (int i = 0; i < d->n_files; i++) shard_close(&d->shards[i]);
    free(d->shards);
    free(d->first_window);
    memset(d, 0, sizeof *d);
}

/* Opens and maps every shard of glob_pattern, sorted by path, and indexes their windows. */
static int dataset_open(Dataset *d, const char *glob_pattern, int T, uint32_t vocab_limit,
                        char *err) {
    memset(d, 0, sizeof *d);
    if (strlen(glob_pattern) >= sizeof d->glob)
        return set_err(err, "%s: glob longer than %zu bytes", glob_pattern, sizeof d->glob - 1);
    strcpy(d->glob, glob_pattern);
    if (T < 1) return set_err(err, "%s: sequence length %d, expected T >= 1", glob_pattern, T);
    if (vocab_limit == 0 || vocab_limit > (uint32_t)INT32_MAX + 1u)
        return set_err(err, "%s: vocabulary limit %" PRIu32 ", expected 1 .. 2^31", glob_pattern,
                       vocab_limit);
    d->T = T;
    d->vocab_limit = vocab_limit;

    glob_t g;
    int grc = glob(glob_pattern, GLOB_NOSORT, NULL, &g);   /* sorted below with strcmp */
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
        if (grc == 0) globfree(&g);
        return set_err(err, "%s: no file matches this glob, expected token shards (./tokenize --out DIR writes "
                       "DIR/train_*.bin, and DIR/val_*.bin only with --val-tokens N)", glob_pattern);
    }
    if (grc != 0)
        return set_err(err, "%s: cannot expand the glob (%s)", glob_pattern,
                       grc == GLOB_NOSPACE ? "out of memory" : "read error");
    if (g.gl_pathc > (size_t)INT32_MAX) {
        globfree(&g);
        return set_err(err, "%s: too many files (%zu)", glob_pattern, g.gl_pathc);
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), compare_paths);
    int n = (int)g.gl_pathc;
    d->shards = calloc((size_t)n, sizeof(Shard));
    d->first_window = calloc((size_t)n + 1, sizeof(uint64_t));
    if (!d->shards || !d->first_window) {
        globfree(&g);
        dataset_free(d);
        return set_err(err, "%s: out of memory for %d shards", glob_pattern, n);
    }
    for (int i = 0; i < n; i++) {
        if (shard_open(&d->shards[i], g.gl_pathv[i], err) != 0) {
            globfree(&g);
            dataset_free(d);
            return -1;
        }
        d->n_files = i + 1;
        const Shard *s = &d->shards[i];
        if (strcmp(s->fingerprint, d->shards[0].fingerprint) != 0) {
            set_err(err, "%s@32: tokenizer fingerprint \"%s\", expected \"%s\" as in %s (one glob, "
                    "one tokenizer)", s->path, s->fingerprint, d->shards[0].fingerprint,
                    d->shards[0].path);
            globfree(&g);
            dataset_free(d);
            return -1;
        }
        d->first_window[i] = d->n_windows;
        d->n_windows += loader_windows_in_file(s->n_tokens, T);
        d->n_tokens += s->n_tokens;
    }
    d->first_window[n] = d->n_windows;
    globfree(&g);
    return 0;
}

/* The file holding window w (w < n_windows): the last file whose first window is <= w. Files
 * without windows share their start with the next file, so the last one with that start is
 * the one that holds w (first_window[n_files] = n_windows > w ends the search). */
static int dataset_file_of(const Dataset *d, uint64_t w) {
    int lo = 0, hi = d->n_files - 1;           /* invariant: answer in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (d->first_window[mid] <= w) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* Copies window w into out [T+1] after checking its tokens against the vocabulary. */
static int dataset_window(const Dataset *d, uint64_t w, int32_t *out, char *err) {
    if (w >= d->n_windows)
        return set_err(err, "%s: window %" PRIu64 " requested, the dataset has %" PRIu64, d->glob,
                       w, d->n_windows);
    int f = dataset_file_of(d, w);
    const Shard *s = &d->shards[f];
    uint64_t begin = (w - d->first_window[f]) * (uint64_t)d->T;
    uint64_t end = begin + (uint64_t)d->T + 1;
    return shard_read_tokens(s, begin, end, d->vocab_limit, (uint32_t *)out, err);
}

/* ------------------------------------------------------------------ training loader */

struct TrainLoader {
    Dataset data;
    uint64_t seed;
};

int train_loader_open(TrainLoader **L, const char *glob_pattern, int T, uint32_t vocab_limit,
                      uint64_t seed, char *err) {
    *L = NULL;
    TrainLoader *l = calloc(1, sizeof *l);
    if (!l) return set_err(err, "%s: out of memory", glob_pattern);
    if (dataset_open(&l->data, glob_pattern, T, vocab_limit, err) != 0) { free(l); return -1; }
    if (l->data.n_windows == 0) {
        set_err(err, "%s: %d file(s) with %" PRIu64 " tokens hold no training window: each needs "
                "a file of more than T = %d tokens", glob_pattern, l->data.n_files,
                l->data.n_tokens, T);
        train_loader_close(l);
        return -1;
    }
    l->seed = seed;
    *L = l;
    return 0;
}

uint64_t train_loader_n_windows(const TrainLoader *L) { return L->data.n_windows; }
int train_loader_n_files(const TrainLoader *L) { return L->data.n_files; }
const char *train_loader_tokenizer(const TrainLoader *L) { return L->data.shards[0].fingerprint; }

int train_loader_window(const TrainLoader *L, uint64_t window, int32_t *out, char *err) {
    return dataset_window(&L->data, window, out, err);
}

uint64_t train_loader_sample_window(const TrainLoader *L, uint64_t sample_number) {
    uint64_t n = L->data.n_windows;
    return loader_permute(n, L->seed, sample_number / n, sample_number % n);
}

int train_loader_sample(const TrainLoader *L, uint64_t sample_number, int32_t *out, char *err) {
    return dataset_window(&L->data, train_loader_sample_window(L, sample_number), out, err);
}

void train_loader_locate(const TrainLoader *L, uint64_t window, const char **path,
                         uint64_t *first_token) {
    const Dataset *d = &L->data;
    if (window >= d->n_windows) { *path = NULL; *first_token = 0; return; }
    int f = dataset_file_of(d, window);
    *path = d->shards[f].path;
    *first_token = (window - d->first_window[f]) * (uint64_t)d->T;
}

void train_loader_fingerprint(const TrainLoader *L, char out[LOADER_FINGERPRINT_LEN + 1]) {
    /* The hashed text: per file "BASENAME\0N_TOKENS\0TOKENIZER\0", fed piece by piece (nothing
     * to allocate, so no way to fail). */
    Sha256 h;
    sha256_init(&h);
    for (int i = 0; i < L->data.n_files; i++) {
        const Shard *s = &L->data.shards[i];
        const char *slash = strrchr(s->path, '/');
        const char *base = slash ? slash + 1 : s->path;
        char n_tokens[24];
        snprintf(n_tokens, sizeof n_tokens, "%" PRIu64, s->n_tokens);
        sha256_update(&h, base, strlen(base) + 1);
        sha256_update(&h, n_tokens, strlen(n_tokens) + 1);
        sha256_update(&h, s->fingerprint, strlen(s->fingerprint) + 1);
    }
    sha256_final_hex(&h, out);
}

void train_loader_close(TrainLoader *L) {
    if (!L) return;
    dataset_free(&L->data);
    free(L);
}

/* ------------------------------------------------------------------ validation set */

struct ValSet {
    Dataset data;
    long n_windows;           /* min(max_windows, windows of the files) */
};

int val_set_open(ValSet **V, const char *glob_pattern, int T, uint32_t vocab_limit,
                 long max_windows, char *err) {
    *V = NULL;
    ValSet *v = calloc(1, sizeof *v);
    if (!v) return set_err(err, "%s: out of memory", glob_pattern);
    if (dataset_open(&v->data, glob_pattern, T, vocab_limit, err) != 0) { free(v); return -1; }
    Dataset *d = &v->data;
    uint64_t use = d->n_windows;
    if (max_windows >= 0 && (uint64_t)max_windows < use) use = (uint64_t)max_windows;
    if (use == 0) {
        if (d->n_windows == 0)
            set_err(err, "%s: %d validation file(s) with %" PRIu64 " tokens hold no window of "
                    "T + 1 = %d tokens, expected a file of more than T tokens", glob_pattern,
                    d->n_files, d->n_tokens, T + 1);
        else
            set_err(err, "%s: 0 validation windows requested (eval.val_tokens below T = %d?), "
                    "expected at least one", glob_pattern, T);
        val_set_close(v);
        return -1;
    }
    if (use > (uint64_t)LONG_MAX) use = (uint64_t)LONG_MAX;
    v->n_windows = (long)use;
    /* Release the files past the windows in use. */
    int keep = dataset_file_of(d, use - 1) + 1;
    for (int i = keep; i < d->n_files; i++) shard_close(&d->shards[i]);
    d->n_files = keep;
    d->first_window[keep] = use;
    d->n_windows = use;
    /* Check every token of the windows in use now, so that a bad token stops the run at
     * start-up rather than at its first evaluation. */
    for (int i = 0; i < keep; i++) {
        uint64_t windows = d->first_window[i + 1] - d->first_window[i];
        if (windows == 0) continue;
        if (shard_check_tokens(&d->shards[i], 0, windows * (uint64_t)T + 1, vocab_limit, err) != 0) {
            val_set_close(v);
            return -1;
        }
    }
    *V = v;
    return 0;
}

long val_set_n_windows(const ValSet *V) { return V->n_windows; }
const char *val_set_glob(const ValSet *V) { return V->data.glob; }
const char *val_set_tokenizer(const ValSet *V) { return V->data.shards[0].fingerprint; }

int val_set_window(const ValSet *V, long k, int32_t *out, char *err) {
    if (k < 0 || k >= V->n_windows)
        return set_err(err, "%s: validation window %ld requested, expected 0 .. %ld", V->data.glob,
                       k, V->n_windows - 1);
    return dataset_window(&V->data, (uint64_t)k, out, err);
}

void val_set_close(ValSet *V) {
    if (!V) return;
    dataset_free(&V->data);
    free(V);
}
