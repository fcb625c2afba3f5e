/* Training loader and validation set (data/loader.c). Shards are written byte by byte here
 * (not with the code under test) with token value = FILE_ID * 1000 + position, so every window
 * read names its file and first position. Checks: the window list of a small hand-worked
 * example (file-name order, windows of T+1 tokens sharing a boundary token, files of <= T
 * tokens giving none), every window exactly once per epoch, determinism, different orders for
 * different seeds and epochs, the permutation being a bijection for many sizes (and 2^22 + 15),
 * docs/spec.md §3.2 validation windows, vocabulary errors with file and offset, fingerprints,
 * and 2000 shards opened under a limit of 64 file descriptors. */
#include "data/loader.h"
#include "common/errors.h"
#include "tests/check.h"
#include "tests/shard_testutil.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define DIR "build/scratch/test_loader"

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The small example, T = 4. Written in an order different from the name order:
 *   d_2.bin  24 tokens -> windows start at 0 4 8 12 16      (20+4 < 24 fails: a multiple of T
 *                                                          gives (n-1)/T windows, not n/T)
 *   d_10.bin 10 tokens -> 0 4                               (8+4 < 10 fails)
 *   d_1.bin   4 tokens -> none                              (0+4 < 4 fails)
 *   d_3.bin   5 tokens -> 0
 * Name order (strcmp): d_1, d_10, d_2, d_3. Window list by first token: */
static const int32_t EXPECTED_STARTS[8] = {10000, 10004, 2000, 2004, 2008, 2012, 2016, 3000};
enum { SMALL_T = 4, SMALL_N = 8 };

static void make_small_example(void) {
    write_shard(DIR "/d_2.bin", 24, 2, NULL, "t");
    write_shard(DIR "/d_10.bin", 10, 10, NULL, "t");
    write_shard(DIR "/d_1.bin", 4, 1, NULL, "t");
    write_shard(DIR "/d_3.bin", 5, 3, NULL, "t");
}

static int window_is_consecutive(const int32_t *w, int T) {
    for (int j = 1; j <= T; j++) if (w[j] != w[0] + j) return 0;
    return 1;
}

static void test_small_example(void) {
    char err[ERR_LEN] = "";
    TrainLoader *L = NULL;
    int rc = train_loader_open(&L, DIR "/d_*.bin", SMALL_T, 1u << 24, 42, err);
    check(rc == 0 && train_loader_n_windows(L) == SMALL_N && train_loader_n_files(L) == 4,
          "loader: window count of the hand-worked example", "rc %d n %" PRIu64 " \"%s\"", rc,
          rc == 0 ? train_loader_n_windows(L) : 0, err);
    if (rc != 0) return;
    int32_t w[SMALL_T + 1];
    int ok = 1;
    for (int k = 0; k < SMALL_N && ok; k++)
        ok = train_loader_window(L, (uint64_t)k, w, err) == 0 && w[0] == EXPECTED_STARTS[k] &&
             window_is_consecutive(w, SMALL_T);
    check(ok, "loader: unshuffled windows in file-name order, T+1 tokens each", "\"%s\"", err);
    const char *path = NULL;
    uint64_t first = 0;
    train_loader_locate(L, 3, &path, &first);
    check(path && strcmp(path, DIR "/d_2.bin") == 0 && first == 4, "loader: locate a window",
          "%s %" PRIu64, path ? path : "(null)", first);

    /* Every window exactly once in each of three epochs, with different orders. */
    int32_t got[3][SMALL_N];
    for (int e = 0; e < 3; e++) {
        for (int i = 0; i < SMALL_N; i++) {
            rc = train_loader_sample(L, (uint64_t)(e * SMALL_N + i), w, err);
            ok = rc == 0 && window_is_consecutive(w, SMALL_T);
            if (!ok) break;
            got[e][i] = w[0];
        }
        if (!ok) break;
    }
    check(ok, "loader: samples are whole windows", "\"%s\"", err);
    int all_once = ok;
    for (int e = 0; e < 3 && all_once; e++) {
        int32_t sorted[SMALL_N], want[SMALL_N];
        memcpy(sorted, got[e], sizeof sorted);
        memcpy(want, EXPECTED_STARTS, sizeof want);
        qsort(sorted, SMALL_N, sizeof(int32_t), cmp_i32);
        qsort(want, SMALL_N, sizeof(int32_t), cmp_i32);
        all_once = memcmp(sorted, want, sizeof sorted) == 0;
    }
    check(all_once, "loader: small example, every window once per epoch", "");
    check(memcmp(got[0], got[1], sizeof got[0]) != 0 || memcmp(got[1], got[2], sizeof got[0]) != 0,
          "loader: small example, epochs reorder", "three epochs in the same order");

    char fp1[LOADER_FINGERPRINT_LEN + 1], fp2[LOADER_FINGERPRINT_LEN + 1];
    train_loader_fingerprint(L, fp1);
    int hex = strlen(fp1) == 64 && strspn(fp1, "0123456789abcdef") == 64;
    check(hex, "loader: fingerprint is 64 hex digits", "\"%s\"", fp1);
    check(strcmp(train_loader_tokenizer(L), "t") == 0, "loader: tokenizer fingerprint", "");
    train_loader_close(L);

    /* Same names and sizes elsewhere: same fingerprint; a changed size: a different one. */
    system("rm -rf " DIR "/moved && mkdir -p " DIR "/moved && cp " DIR "/d_*.bin " DIR "/moved/");
    rc = train_loader_open(&L, DIR "/moved/d_*.bin", SMALL_T, 1u << 24, 7, err);
    if (rc == 0) { train_loader_fingerprint(L, fp2); train_loader_close(L); }
    check(rc == 0 && strcmp(fp1, fp2) == 0, "loader: fingerprint ignores directory and seed",
          "%s vs %s \"%s\"", fp1, fp2, err);
    write_shard(DIR "/moved/d_3.bin", 6, 3, NULL, "t");
    rc = train_loader_open(&L, DIR "/moved/d_*.bin", SMALL_T, 1u << 24, 42, err);
    if (rc == 0) { train_loader_fingerprint(L, fp2); train_loader_close(L); }
    check(rc == 0 && strcmp(fp1, fp2) != 0, "loader: fingerprint changes with a file's size", "");
    write_shard(DIR "/moved/d_3.bin", 5, 3, NULL, "u");
    rc = train_loader_open(&L, DIR "/moved/d_*.bin", SMALL_T, 1u << 24, 42, err);
    check(rc != 0 && strstr(err, "d_3.bin@32") && strstr(err, "\"u\""),
          "loader: mixed tokenizer fingerprints rejected", "rc %d \"%s\"", rc, err);
    if (rc == 0) train_loader_close(L);
}

/* Three files, 1500 windows of T = 8; samples over three epochs and two seeds. */
static void test_epochs_and_seeds(void) {
    enum { T = 8 };
    /* Tokens: e_a 1000 + p (1000..5000), e_b 0..6, e_c 9000 + p (9000..17004): disjoint. */
    write_shard(DIR "/e_a.bin", 4000 + 1, 1, NULL, "t");   /* 500 windows */
    write_shard(DIR "/e_b.bin", 7, 0, NULL, "t");          /* none: 7 <= T */
    write_shard(DIR "/e_c.bin", 8000 + 5, 9, NULL, "t");   /* 1000 windows, 4 tokens left over */
    char err[ERR_LEN] = "";
    TrainLoader *A = NULL, *B = NULL, *C = NULL;
    int rc = train_loader_open(&A, DIR "/e_*.bin", T, 1u << 24, 1234, err);
    rc |= train_loader_open(&B, DIR "/e_*.bin", T, 1u << 24, 1234, err);
    rc |= train_loader_open(&C, DIR "/e_*.bin", T, 1u << 24, 1235, err);
    const uint64_t n = 1500;
    check(rc == 0 && train_loader_n_windows(A) == n, "loader: 1500 windows over three files",
          "rc %d \"%s\"", rc, err);
    if (rc != 0) return;
    /* Window identity from its first token: e_a position p is window p/8, e_c position p is
     * window 500 + p/8. */
    unsigned char *seen = calloc(n, 1);
    int32_t w[T + 1], wb[T + 1];
    int once = 1, same = 1, consecutive = 1;
    uint64_t *order = malloc(3 * n * sizeof *order);
    for (uint64_t g = 0; g < 3 * n; g++) {
        if (train_loader_sample(A, g, w, err) != 0 || train_loader_sample(B, g, wb, err) != 0) {
            once = 0;
            break;
        }
        consecutive &= window_is_consecutive(w, T);
        same &= memcmp(w, wb, sizeof w) == 0;
        uint64_t id;
        if (w[0] >= 9000) id = 500 + (uint64_t)(w[0] - 9000) / T;   /* e_c: 9000 + p */
        else id = (uint64_t)(w[0] - 1000) / T;                       /* e_a: 1000 + p */
        if (id >= n || (w[0] >= 9000 ? (w[0] - 9000) % T : (w[0] - 1000) % T) != 0) { once = 0; break; }
        order[g] = id;
        if (g % n == 0) memset(seen, 0, n);
        if (seen[id]) once = 0;
        seen[id] = 1;
    }
    check(once, "loader: every window exactly once in each of three epochs", "\"%s\"", err);
    check(consecutive, "loader: sampled windows are consecutive tokens", "");
    check(same, "loader: same seed, same samples (two loaders)", "");
    int differ_epoch = 0, differ_seed = 0, fixed = 0, runs = 0;
    for (uint64_t i = 0; i < n; i++) {
        differ_epoch += order[i] != order[n + i];
        fixed += order[i] == i;
        if (i + 1 < n) runs += order[i + 1] == order[i] + 1;
        train_loader_sample(C, i, w, err);
        uint64_t id = w[0] >= 9000 ? 500 + (uint64_t)(w[0] - 9000) / T : (uint64_t)(w[0] - 1000) / T;
        differ_seed += id != order[i];
    }
    check(differ_epoch > 0.95 * n, "loader: epochs 0 and 1 order differently", "%d of %d positions differ",
          differ_epoch, (int)n);
    check(differ_seed > 0.95 * n, "loader: seeds 1234 and 1235 order differently", "%d of %d positions differ",
          differ_seed, (int)n);
    check(fixed < 20 && runs < 20, "loader: order looks shuffled", "%d fixed points, %d ascending steps",
          fixed, runs);
    free(order);
    free(seen);
    train_loader_close(A);
    train_loader_close(B);
    train_loader_close(C);
}

static void test_permutation(void) {
    int ok = 1;
    unsigned char *hit = malloc(1 << 12);
    uint64_t bad_n = 0;
    for (uint64_t n = 1; n <= 4096 && ok; n += (n < 300 ? 1 : 97)) {
        memset(hit, 0, n);
        for (uint64_t i = 0; i < n && ok; i++) {
            uint64_t p = loader_permute(n, 5, n % 3, i);
            ok = p < n && !hit[p];
            if (ok) hit[p] = 1;
        }
        if (!ok) bad_n = n;
    }
    free(hit);
    check(ok, "permute: bijection for n = 1..300 and up to 4096", "fails for n = %" PRIu64, bad_n);

    /* Just above 2^22: the Feistel domain is 2^24, the worst case for cycle-walking (the same
     * code serves the 24M windows of a 100B-token corpus; this size keeps the test fast). */
    const uint64_t big = (1ull << 22) + 15;
    uint8_t *bits = calloc(big / 8 + 1, 1);
    ok = 1;
    for (uint64_t i = 0; i < big && ok; i++) {
        uint64_t p = loader_permute(big, 99, 3, i);
        ok = p < big && !(bits[p >> 3] & (1u << (p & 7)));
        bits[p >> 3] |= (uint8_t)(1u << (p & 7));
    }
    free(bits);
    check(ok, "permute: bijection of 2^22 + 15 windows with no table", "collision or out of range");
    uint64_t huge = (1ull << 62) + 12345;
    uint64_t a = loader_permute(huge, 1, 0, 17), b = loader_permute(huge, 1, 0, 18);
    check(a < huge && b < huge && a != b, "permute: 2^62-sized domain", "");
}

static void test_validation_set(void) {
    char err[ERR_LEN] = "";
    ValSet *V = NULL;
    /* docs/spec.md §3.2 by hand for the small example, T = 4, first 4 windows: d_10 tokens
     * 0..4 and 4..8, then d_2 tokens 0..4 and 4..8 (d_1 has 4 tokens: no window). */
    static const int32_t want[4][5] = {
        {10000, 10001, 10002, 10003, 10004},
        {10004, 10005, 10006, 10007, 10008},
        {2000, 2001, 2002, 2003, 2004},
        {2004, 2005, 2006, 2007, 2008},
    };
    int rc = val_set_open(&V, DIR "/d_*.bin", 4, 1u << 24, 4, err);
    int ok = rc == 0 && val_set_n_windows(V) == 4;
    int32_t w[5];
    for (long k = 0; ok && k < 4; k++) ok = val_set_window(V, k, w, err) == 0 && memcmp(w, want[k], sizeof w) == 0;
    check(ok, "val: first 4 windows match docs/spec.md §3.2 by hand", "rc %d \"%s\"", rc, err);
    if (rc == 0) {
        rc = val_set_window(V, 4, w, err);
        check(rc != 0 && strstr(err, "window 4"), "val: window past the set rejected", "\"%s\"", err);
        val_set_close(V);
    }
    rc = val_set_open(&V, DIR "/d_*.bin", 4, 1u << 24, 1000, err);
    ok = rc == 0 && val_set_n_windows(V) == 8;
    static const int32_t want_last[5] = {3000, 3001, 3002, 3003, 3004};   /* d_3: 5 tokens, one window */
    ok = ok && val_set_window(V, 7, w, err) == 0 && memcmp(w, want_last, sizeof w) == 0;
    check(ok, "val: fewer windows than requested gives all 8", "rc %d \"%s\"", rc, err);
    if (rc == 0) val_set_close(V);

    rc = val_set_open(&V, DIR "/d_1.bin", 4, 1u << 24, 10, err);
    check(rc != 0 && strstr(err, DIR "/d_1.bin") && strstr(err, "4 tokens") && strstr(err, "T + 1 = 5"),
          "val: a set shorter than one window is an error naming glob, tokens and T",
          "rc %d \"%s\"", rc, err);
    if (rc == 0) val_set_close(V);
    rc = val_set_open(&V, DIR "/d_*.bin", 4, 1u << 24, 0, err);
    check(rc != 0 && strstr(err, "0 validation windows"), "val: zero windows requested is an error",
          "rc %d \"%s\"", rc, err);
    if (rc == 0) val_set_close(V);
    rc = val_set_open(&V, DIR "/none_*.bin", 4, 1u << 24, 3, err);
    check(rc != 0 && strstr(err, DIR "/none_*.bin"), "val: empty glob names the glob", "\"%s\"", err);

    /* A bad token (999 >= 500) at index 6 of v_0.bin: byte offset 1024 + 24 = 1048. Window 1
     * (tokens 4..8) holds it, window 0 (0..4) does not. */
    uint32_t tok[9] = {1, 2, 3, 4, 5, 6, 999, 8, 9};
    write_shard(DIR "/v_0.bin", 9, 0, tok, "t");
    TrainLoader *L = NULL;
    rc = train_loader_open(&L, DIR "/v_0.bin", 4, 500, 1, err);
    if (rc == 0) {
        int r0 = train_loader_window(L, 0, w, err);
        int r1 = train_loader_window(L, 1, w, err);
        check(r0 == 0 && r1 != 0 && strstr(err, DIR "/v_0.bin@1048:") && strstr(err, "999"),
              "loader: sample with a token >= vocabulary names file and offset", "\"%s\"", err);
        train_loader_close(L);
    } else {
        check(0, "loader: sample with a token >= vocabulary names file and offset", "open: %s", err);
    }
    rc = val_set_open(&V, DIR "/v_0.bin", 4, 500, 1, err);
    check(rc == 0, "val: bad token outside the windows in use is not an error", "\"%s\"", err);
    if (rc == 0) val_set_close(V);
    rc = val_set_open(&V, DIR "/v_0.bin", 4, 500, 2, err);
    check(rc != 0 && strstr(err, DIR "/v_0.bin@1048:"), "val: bad token found at open", "\"%s\"", err);
    if (rc == 0) val_set_close(V);

    rc = train_loader_open(&L, DIR "/d_1.bin", 4, 1u << 24, 1, err);
    check(rc != 0 && strstr(err, "no training window"), "loader: dataset without a window is an error",
          "\"%s\"", err);
    if (rc == 0) train_loader_close(L);
}

/* 2000 shards under a limit of 64 open files: the loader must keep mappings, not descriptors. */
static void test_many_shards(void) {
    enum { FILES = 2000, T = 4 };
    system("mkdir -p " DIR "/many");
    for (int i = 0; i < FILES; i++) {
        char path[256];
        uint32_t tok[6];
        for (int j = 0; j < 6; j++) tok[j] = (uint32_t)(i * 8 + j);
        snprintf(path, sizeof path, DIR "/many/m_%05d.bin", i);
        write_shard(path, 6, 0, tok, "t");
    }
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &low);
    char err[ERR_LEN] = "";
    TrainLoader *L = NULL;
    int rc = train_loader_open(&L, DIR "/many/m_*.bin", T, 1u << 24, 5, err);
    setrlimit(RLIMIT_NOFILE, &old);
    check(rc == 0 && train_loader_n_windows(L) == FILES, "loader: 2000 shards with 64 descriptors",
          "rc %d \"%s\"", rc, err);
    if (rc != 0) return;
    unsigned char *seen = calloc(FILES, 1);
    int ok = 1;
    int32_t w[T + 1];
    for (int g = 0; g < FILES && ok; g++) {
        ok = train_loader_sample(L, (uint64_t)g, w, err) == 0 && w[0] % 8 == 0 &&
             window_is_consecutive(w, T) && !seen[w[0] / 8];
        if (ok) seen[w[0] / 8] = 1;
    }
    check(ok, "loader: 2000 shards, every window once", "\"%s\"", err);
    train_loader_close(L);
    free(seen);
}

int main(void) {
    system("rm -rf " DIR " && mkdir -p " DIR);
    make_small_example();
    test_small_example();
    test_epochs_and_seeds();
    test_permutation();
    test_validation_set();
    test_many_shards();
    system("rm -rf " DIR);
    return check_exit_code();
}
