/* data.stages (data/train_stages.c): the spec parser's accepted and refused forms, the stage
 * of a step, the stage-local sample number, the fingerprint rule (no stages: exactly the
 * data.train loader's, so old checkpoints resume; stages: depends on every boundary), and a
 * stage with another tokenizer refused. Shards are written byte by byte here (token value =
 * FILE_ID * 1000 + position), as in tests/test_loader.c. The training-run behaviour (windows
 * per step, resume across a boundary, config errors) is tests/test_train_stages.py. */
#include "data/train_stages.h"
#include "common/errors.h"
#include "tests/check.h"
#include "tests/shard_testutil.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "build/scratch/test_train_stages_c"

static void test_parse(void) {
    TrainStageSpec s[TRAIN_STAGES_MAX - 1];
    int n = -1;
    char why[ERR_LEN] = "";
    check(train_stages_parse("", s, &n, why) == 0 && n == 0, "parse: empty spec = no stages", "n %d: %s", n, why);
    check(train_stages_parse("  ", s, &n, why) == 0 && n == 0, "parse: blank spec = no stages", "n %d: %s", n, why);
    int rc = train_stages_parse(" 100 : a/*.bin ,2000:b:c.bin", s, &n, why);
    check(rc == 0 && n == 2 && s[0].first_step == 100 && !strcmp(s[0].glob, "a/*.bin") && s[1].first_step == 2000 &&
          !strcmp(s[1].glob, "b:c.bin"), "parse: two stages, spaces trimmed, the glob is all after the first ':'",
          "rc %d n %d '%s' '%s': %s", rc, n, n > 0 ? s[0].glob : "", n > 1 ? s[1].glob : "", why);
    const char *bad[][2] = {{"100", "no ':'"}, {"x:a", "whole number"}, {"0:a", "whole number >= 1"},
                            {"-5:a", "whole number"}, {"5:a, 5:b", "strictly increasing"},
                            {"5:a, 3:b", "strictly increasing"}, {"5:", "empty glob"},
                            {"99999999999999999999:a", "whole number"}, {"+5:a", "whole number"},
                            {"5:a,", "is empty"}, {",5:a", "is empty"}, {"5:a, ,7:b", "is empty"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        rc = train_stages_parse(bad[i][0], s, &n, why);
        check(rc != 0 && strstr(why, bad[i][1]) != NULL, "parse: a bad spec is refused with its reason",
              "'%s': rc %d, '%s' (expected '%s')", bad[i][0], rc, why, bad[i][1]);
    }
    /* a stage's own length: "@DIGITS" at the end of its glob; any other '@' belongs to the glob */
    rc = train_stages_parse("5:a/*.bin@64, 9: b@x.bin , 12:c@ 128", s, &n, why);
    check(rc == 0 && n == 3 && !strcmp(s[0].glob, "a/*.bin") && s[0].seq_len == 64 && !strcmp(s[1].glob, "b@x.bin") &&
          s[1].seq_len == 0 && !strcmp(s[2].glob, "c@ 128") && s[2].seq_len == 0,
          "parse: GLOB@T sets the stage's length; an '@' not followed by digits only is part of the glob",
          "rc %d n %d '%s'@%d '%s'@%d '%s'@%d: %s", rc, n, n > 0 ? s[0].glob : "", n > 0 ? s[0].seq_len : -1,
          n > 1 ? s[1].glob : "", n > 1 ? s[1].seq_len : -1, n > 2 ? s[2].glob : "", n > 2 ? s[2].seq_len : -1, why);
    rc = train_stages_parse("5:a @32", s, &n, why);
    check(rc == 0 && n == 1 && !strcmp(s[0].glob, "a") && s[0].seq_len == 32, "parse: spaces before '@T' are trimmed",
          "rc %d '%s' %d: %s", rc, n ? s[0].glob : "", n ? s[0].seq_len : -1, why);
    const char *bad_len[][2] = {{"5:a@0", "whole number >= 1"}, {"5:@16", "empty glob"},
                                {"5:a@99999999999", "whole number >= 1"}};
    for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
        why[0] = 0;
        rc = train_stages_parse(bad_len[i][0], s, &n, why);
        check(rc != 0 && strstr(why, bad_len[i][1]) != NULL, "parse: a bad stage length is refused with its reason",
              "'%s': rc %d, '%s' (expected '%s')", bad_len[i][0], rc, why, bad_len[i][1]);
    }
    char many[1024] = "";
    for (int j = 1; j <= TRAIN_STAGES_MAX; j++) sprintf(many + strlen(many), "%s%d:g", j > 1 ? "," : "", j);
    rc = train_stages_parse(many, s, &n, why);
    check(rc != 0 && strstr(why, "at most"), "parse: more than TRAIN_STAGES_MAX - 1 stages are refused", "rc %d: %s",
          rc, why);
}

static void test_stages(void) {
    mkdir("build", 0755);
    mkdir("build/scratch", 0755);
    mkdir(DIR, 0755);
    write_shard(DIR "/a.bin", 41, 1, NULL, "tok");     /* T = 4: 10 windows */
    write_shard(DIR "/b.bin", 25, 2, NULL, "tok");     /* 6 windows */
    write_shard(DIR "/c.bin", 25, 3, NULL, "other");
    const int T = 4;
    const long Bg = 3;
    char err[ERR_LEN] = "";
    TrainData *plain = NULL, *st = NULL, *st2 = NULL;
    int rc = train_data_open(&plain, DIR "/a.bin", "", Bg, T, 0, 1u << 24, 5, err);
    check(rc == 0 && train_data_n_stages(plain) == 1, "open: no stages gives one stage", "rc %d: %s", rc, err);
    rc = train_data_open(&st, DIR "/a.bin", "4:" DIR "/b.bin", Bg, T, 0, 1u << 24, 5, err);
    check(rc == 0 && train_data_n_stages(st) == 2, "open: one stage after data.train", "rc %d: %s", rc, err);
    rc = train_data_open(&st2, DIR "/a.bin", "5:" DIR "/b.bin", Bg, T, 0, 1u << 24, 5, err);
    if (!plain || !st || !st2) { check(0, "open: all three datasets", "%s", err); return; }

    check(train_data_stage_at(st, 0) == 0 && train_data_stage_at(st, 3) == 0 && train_data_stage_at(st, 4) == 1 &&
          train_data_stage_at(st, 1000) == 1, "stage_at: steps 0..3 stage 0, 4 on stage 1", "");
    /* step 4's first sample (g = 12) is stage 1's sample 0: a window of b.bin (tokens 2000 + 4w) */
    int32_t out[5];
    uint64_t w = 99;
    rc = train_data_sample(st, 4, 12, out, &w, err);
    TrainLoader *b = NULL;
    int32_t ref[5];
    train_loader_open(&b, DIR "/b.bin", T, 1u << 24, 5 ^ 0x9e3779b97f4a7c15ULL, err);   /* stage 1's key (header) */
    train_loader_sample(b, 0, ref, err);
    check(rc == 0 && out[0] / 1000 == 2 && memcmp(out, ref, sizeof out) == 0 && (int32_t)w * T == out[0] - 2000,
          "sample: the first sample of stage 1 is sample 0 of its own loader", "rc %d out[0] %d ref[0] %d w %llu",
          rc, out[0], ref[0], (unsigned long long)w);
    rc = train_data_sample(st, 3, 11, out, &w, err);
    check(rc == 0 && out[0] / 1000 == 1, "sample: step 3 reads data.train", "rc %d out[0] %d", rc, out[0]);
    rc = train_data_sample(st, 4, 11, out, &w, err);
    int rc2 = train_data_sample(st, 4, 15, out, &w, err);
    check(rc != 0 && rc2 != 0, "sample: a sample number outside its step's samples is an error", "rc %d %d", rc, rc2);
    train_loader_close(b);

    char fp_plain[LOADER_FINGERPRINT_LEN + 1], fp_loader[LOADER_FINGERPRINT_LEN + 1];
    char fp_st[LOADER_FINGERPRINT_LEN + 1], fp_st2[LOADER_FINGERPRINT_LEN + 1];
    train_data_fingerprint(plain, 1000, fp_plain);
    train_loader_fingerprint(train_data_stage(plain, 0, NULL, NULL), fp_loader);
    check(!strcmp(fp_plain, fp_loader), "fingerprint: without stages, exactly data.train's loader fingerprint",
          "%s vs %s", fp_plain, fp_loader);
    train_data_fingerprint(st, 4, fp_st);        /* stage 1 (from 4) not begun before step 4 */
    check(!strcmp(fp_st, fp_loader), "fingerprint: before the first boundary, the plain one", "%s vs %s", fp_st,
          fp_loader);
    train_data_fingerprint(st, 5, fp_st);
    train_data_fingerprint(st2, 5, fp_st2);      /* st2's stage 1 (from 5) not begun */
    check(strcmp(fp_st, fp_loader) && !strcmp(fp_st2, fp_loader) && strlen(fp_st) == LOADER_FINGERPRINT_LEN,
          "fingerprint: at step 5, the begun stage counts, the one not begun does not", "%s %s %s", fp_loader, fp_st,
          fp_st2);
    train_data_fingerprint(st, 6, fp_st);
    train_data_fingerprint(st2, 6, fp_st2);
    check(strcmp(fp_st, fp_st2) && strcmp(fp_st2, fp_loader), "fingerprint: once both began, it depends on the boundary",
          "%s %s", fp_st, fp_st2);

    /* stage 2 re-reads data.train's file: another order (train_stage_seed), one epoch compared */
    TrainData *again = NULL;
    rc = train_data_open(&again, DIR "/a.bin", "4:" DIR "/b.bin, 8:" DIR "/a.bin", Bg, T, 0, 1u << 24, 5, err);
    uint64_t w0[12], w2[12];
    for (int k = 0; rc == 0 && k < 12; k++) {
        rc |= train_data_sample(again, k / 3, (uint64_t)k, out, &w0[k], err);
        rc |= train_data_sample(again, 8 + k / 3, 24 + (uint64_t)k, out, &w2[k], err);
    }
    check(rc == 0 && memcmp(w0, w2, sizeof w0) != 0, "seed: a later stage over data.train's files reads another order",
          "rc %d: %s", rc, err);
    train_data_close(again);
    train_data_close(plain);
    train_data_close(st);
    train_data_close(st2);

    /* lengths: each stage reads windows of its own T+1 tokens; a begun stage's length is in the
     * fingerprint, and a run whose every stage is at data.seq_len keeps the length-free one */
    TrainData *len_st = NULL, *len_same = NULL;
    rc = train_data_open(&len_st, DIR "/a.bin", "4:" DIR "/b.bin@2", Bg, T, 2, 1u << 24, 5, err);
    rc |= train_data_open(&len_same, DIR "/a.bin", "4:" DIR "/b.bin@4", Bg, T, T, 1u << 24, 5, err);
    check(rc == 0 && train_data_stage_seq_len(len_st, 0) == 2 && train_data_stage_seq_len(len_st, 1) == 2 &&
          train_data_stage_seq_len(len_same, 1) == T &&
          train_loader_n_windows(train_data_stage(len_st, 0, NULL, NULL)) == 20 &&
          train_loader_n_windows(train_data_stage(len_st, 1, NULL, NULL)) == 12,
          "lengths: stage 0 at data.train_seq_len, stage 1 at its @T, each cut into windows of its own T",
          "rc %d: %s", rc, err);
    int32_t w3[3];
    rc = train_data_sample(len_st, 0, 0, w3, NULL, err);
    check(rc == 0 && w3[1] == w3[0] + 1 && w3[2] == w3[0] + 2 && w3[0] % 2 == 0 && w3[0] / 1000 == 1,
          "lengths: a sample of a 2-token stage is 3 consecutive tokens starting at a multiple of 2",
          "rc %d: %d %d %d", rc, w3[0], w3[1], w3[2]);
    char fp_len[LOADER_FINGERPRINT_LEN + 1], fp_same[LOADER_FINGERPRINT_LEN + 1];
    train_data_fingerprint(len_st, 1, fp_len);
    train_data_fingerprint(len_same, 6, fp_same);
    check(strcmp(fp_len, fp_loader) != 0 && !strcmp(fp_same, fp_st),
          "fingerprint: data.train at another length is other data; lengths equal to seq_len change nothing",
          "%s %s %s", fp_len, fp_same, fp_st);
    train_data_close(len_st);
    train_data_close(len_same);
    TrainData *bad = NULL;
    rc = train_data_open(&bad, DIR "/a.bin", "4:" DIR "/b.bin@5", Bg, T, 0, 1u << 24, 5, err);
    check(rc != 0 && bad == NULL && strstr(err, "stage 1") && strstr(err, "above data.seq_len"),
          "open: a stage longer than data.seq_len is refused, naming it", "rc %d: %s", rc, err);
    rc = train_data_open(&bad, DIR "/a.bin", "", Bg, T, 8, 1u << 24, 5, err);
    check(rc != 0 && bad == NULL && strstr(err, "train_seq_len"), "open: data.train_seq_len above data.seq_len is refused",
          "rc %d: %s", rc, err);
    err[0] = 0;
    rc = train_data_open(&bad, DIR "/a.bin", "4:" DIR "/c.bin", Bg, T, 0, 1u << 24, 5, err);
    check(rc != 0 && bad == NULL && strstr(err, "tokenizer") && strstr(err, "c.bin"),
          "open: a stage with another tokenizer is refused, naming it", "rc %d: %s", rc, err);
    rc = train_data_open(&bad, DIR "/a.bin", "4:" DIR "/none*.bin", Bg, T, 0, 1u << 24, 5, err);
    check(rc != 0 && bad == NULL && strstr(err, "stage 1 (4:") && strstr(err, "none*.bin"),
          "open: a stage matching no file is refused, naming the stage and its glob", "rc %d: %s", rc, err);
}

int main(void) {
    test_parse();
    test_stages();
    return check_exit_code();
}
