/* libFuzzer harness: a checkpoint's state.json (trainer/checkpoint.c, checkpoint_read_state),
 * what a resumed run trusts to continue: step, tokens, loader position, world size, seed and
 * the sizes of the checkpoint's other files.
 *
 * Input: the state.json text. It is written into a scratch checkpoint directory that also
 * holds a 16-byte model.safetensors and config.ini and an optimizer/rank_00000.bin, so the file
 * list's size checks meet both present and missing files. Any sanitizer report or crash is a
 * finding; a rejected file is the normal outcome. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/errors.h"
#include "trainer/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

static char ckpt_dir[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/step_00000010", fuzz_scratch_dir());
    char opt_dir[1100];
    snprintf(opt_dir, sizeof opt_dir, "%s/optimizer", ckpt_dir);
    if (mkdir(ckpt_dir, 0700) != 0 || mkdir(opt_dir, 0700) != 0) { perror(ckpt_dir); abort(); }
    fuzz_write_file("step_00000010/model.safetensors", "0123456789abcdef", 16);
    fuzz_write_file("step_00000010/config.ini", "0123456789abcdef", 16);
    fuzz_write_file("step_00000010/optimizer/rank_00000.bin", "0123456789abcdef", 16);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file("step_00000010/state.json", data, size);
    TrainState st;
    char err[ERR_LEN];
    checkpoint_read_state(ckpt_dir, &st, err);
    return 0;
}
