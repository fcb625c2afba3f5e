/* libFuzzer harness: the run configuration parser (trainer/run_config.c, config_load).
 *
 * Input: an INI file, optionally followed by command-line overrides, each after a NUL byte:
 *   "[model]\nd_model = 64\n" "\0" "train.steps=10" "\0" "model.window=4"
 * The INI part is written to a scratch file and config_load reads it and applies the
 * overrides (at most 16), exactly as ./train does; a config that loads is then serialized
 * (config_to_string) and its derived sizes computed. Any sanitizer report or crash is a
 * finding; a rejected input is the normal outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "trainer/run_config.h"
#include "model/dims.h"
#include "common/errors.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_OVERRIDES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t ini_len = nul ? (size_t)(nul - data) : size;
    const char *path = fuzz_write_file("config.ini", data, ini_len);

    char *rest = NULL, *overrides[MAX_OVERRIDES];
    int n_overrides = 0;
    if (nul) {
        size_t rest_len = size - ini_len - 1;
        rest = malloc(rest_len + 1);
        memcpy(rest, nul + 1, rest_len);
        rest[rest_len] = 0;
        for (char *p = rest; n_overrides < MAX_OVERRIDES && p <= rest + rest_len; p += strlen(p) + 1)
            overrides[n_overrides++] = p;
    }
    Config *cfg = malloc(sizeof *cfg);
    char err[ERR_LEN];
    if (config_load(cfg, path, n_overrides, overrides, err) == 0) {
        char *text = config_to_string(cfg);
        free(text);
        volatile int windows = dims_of(&cfg->model, cfg->data.seq_len).n_windows;
        (void)windows;
    }
    free(cfg);
    free(rest);
    return 0;
}
