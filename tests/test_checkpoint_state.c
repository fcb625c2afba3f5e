/* Tests of checkpoint_read_state (trainer/checkpoint.c): a state.json as checkpoint_save
 * writes it is read back exactly; counters that are not whole numbers in range (1e300, -1,
 * 2.5, world size 0) and a file list that is not an object are rejected as a corrupt
 * checkpoint instead of being converted (regression: fuzz_state_json, a double outside the
 * range of long converted to long), and a missing required field or an ill-typed one gives an
 * error naming state.json and the key (the field table of trainer/checkpoint.c). Scratch files
 * live in build/scratch/test_checkpoint_state/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/errors.h"
#include "trainer/checkpoint.h"
#include "tests/check.h"

#define DIR "build/scratch/test_checkpoint_state"
/* the files a state of world size <= 2 must list (trainer/checkpoint.c); sizes only, as a
 * checkpoint written before checksums (no state_sha256) records them */
#define OTHER_FILES "\"config.ini\": 3, \"optimizer/rank_00000.bin\": 2, \"optimizer/rank_00001.bin\": 2"
#define GOOD_FILES "\"files\": {\"model.safetensors\": 4, " OTHER_FILES "}"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static int read_state(const char *fields, TrainState *st, char *err) {
    char text[2048];
    snprintf(text, sizeof text, "{%s}", fields);
    write_file(DIR "/state.json", text);
    return checkpoint_read_state(DIR, st, err);
}

#define COUNTS(step, tokens, samples, world) \
    "\"complete\": true, \"step\": " step ", \"tokens\": " tokens ", \"samples\": " samples ", \"updates\": 9, \"skipped_steps\": 1, " \
    "\"world_size\": " world ", \"seed\": \"18446744073709551615\", \"data_fingerprint\": \"abc\", "

int main(void) {
    mkdir("build", 0755);
    mkdir("build/scratch", 0755);
    mkdir(DIR, 0755);
    write_file(DIR "/model.safetensors", "1234");
    write_file(DIR "/config.ini", "[x]");
    mkdir(DIR "/optimizer", 0755);
    write_file(DIR "/optimizer/rank_00000.bin", "ab");
    write_file(DIR "/optimizer/rank_00001.bin", "ab");
    TrainState st;
    char err[ERR_LEN] = "";

    int rc = read_state(COUNTS("10", "5120", "9007199254740992", "2") GOOD_FILES, &st, err);
    check(rc == 0 && st.step == 10 && st.tokens == 5120 && st.samples == 9007199254740992ull && st.updates == 9 &&
              st.skipped_steps == 1 && st.world_size == 2 && st.seed == 18446744073709551615ull &&
              strcmp(st.data_fingerprint, "abc") == 0,
          "checkpoint state: a valid state.json is read exactly", "rc %d: %s", rc, err);

    struct { const char *name, *fields, *want; } bad[] = {
        {"step 1e300", COUNTS("1e300", "5120", "80", "1") GOOD_FILES, "'step'"},
        {"negative tokens", COUNTS("10", "-1", "80", "1") GOOD_FILES, "'tokens'"},
        {"fractional step", COUNTS("2.5", "5120", "80", "1") GOOD_FILES, "'step'"},
        {"samples 2^64", COUNTS("10", "5120", "18446744073709551616", "1") GOOD_FILES, "'samples'"},
        {"world size 0", COUNTS("10", "5120", "80", "0") GOOD_FILES, "'world_size'"},
        {"world size 1e10", COUNTS("10", "5120", "80", "1e10") GOOD_FILES, "'world_size'"},
        {"file list an array", COUNTS("10", "5120", "80", "1") "\"files\": [4]", "no file list"},
        {"file size 1e300", COUNTS("10", "5120", "80", "1") "\"files\": {\"model.safetensors\": 1e300, " OTHER_FILES "}", "not a byte count"},
        {"file size wrong", COUNTS("10", "5120", "80", "1") "\"files\": {\"model.safetensors\": 5, " OTHER_FILES "}", "size 4 bytes, expected 5"},
        /* every field of the table: a missing required one and an ill-typed one name the file and the key */
        {"updates missing", "\"complete\": true, \"step\": 10, \"tokens\": 5, \"samples\": 8, \"skipped_steps\": 1, "
                            "\"world_size\": 1, \"seed\": \"7\", " GOOD_FILES, "state.json: key 'updates' missing"},
        {"seed missing", "\"complete\": true, \"step\": 10, \"tokens\": 5, \"samples\": 8, \"updates\": 9, \"skipped_steps\": 1, "
                         "\"world_size\": 1, " GOOD_FILES, "state.json: key 'seed' missing or not a decimal string"},
        {"seed a number", "\"complete\": true, \"step\": 10, \"tokens\": 5, \"samples\": 8, \"updates\": 9, "
                          "\"skipped_steps\": 1, \"world_size\": 1, \"seed\": 7, " GOOD_FILES, "key 'seed'"},
        {"data_fingerprint a number", "\"complete\": true, \"step\": 10, \"tokens\": 5, \"samples\": 8, \"updates\": 9, "
                                      "\"skipped_steps\": 1, \"world_size\": 1, \"seed\": \"7\", \"data_fingerprint\": 5, " GOOD_FILES,
         "state.json: key 'data_fingerprint' missing or not a string"},
        {"n_floats fractional", COUNTS("10", "5120", "80", "1") "\"n_floats\": 1.5, " GOOD_FILES, "state.json: key 'n_floats'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[200];
        err[0] = 0;
        rc = read_state(bad[i].fields, &st, err);
        snprintf(name, sizeof name, "checkpoint state: %s is rejected", bad[i].name);
        check(rc != 0 && strstr(err, bad[i].want) && strstr(err, "corrupt checkpoint"), name,
              "rc %d, err \"%s\" (expected it to name %s)", rc, err, bad[i].want);
    }
    return check_exit_code();
}
