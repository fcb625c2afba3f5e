/* libFuzzer harness: lookup-probe set files (data/probe.c, probe_set_load; format in
 * data/probe.h).
 *
 * Input: a whole probe file. It is loaded twice, without limits and with the limits a model
 * imposes (vocabulary 256, evaluation length 256), and every prompt of a set that loads is
 * read the way the evaluator reads it (trainer/probe_eval.c): all its tokens, the query token
 * at length - 1 and the key at t_key. Any sanitizer report or crash is a finding; a rejected
 * file is the normal outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "data/probe.h"
#include "common/errors.h"
#include "tests/fuzz/fuzz_util.h"

static volatile uint32_t sink;  /* unsigned: the sum may wrap */

static void read_set(const ProbeSet *ps) {
    int n = probe_set_count(ps);
    for (int p = 0; p < PROBE_N_PROTOCOLS; p++) sink += probe_set_count_protocol(ps, p);
    sink += (uint32_t)probe_set_residues(ps) + (uint32_t)probe_set_max_length(ps) + (uint32_t)probe_set_query_position(ps);
    sink += probe_set_vocab_size(ps) + (uint32_t)strlen(probe_set_fingerprint(ps));
    for (int i = 0; i < n; i++) {
        ProbePrompt pr;
        if (probe_set_prompt(ps, i, &pr) != 0) continue;
        for (int k = 0; k < pr.length; k++) sink += (uint32_t)pr.tokens[k];
        sink += (uint32_t)pr.tokens[pr.length - 1] + (uint32_t)pr.tokens[pr.t_key] + (uint32_t)pr.answer;
        sink += (uint32_t)pr.tokens[probe_set_query_position(ps)];
        sink += (uint32_t)strlen(probe_protocol_name(pr.protocol));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("probe.bin", data, size);
    char err[ERR_LEN];
    ProbeSet *ps;
    if (probe_set_load(&ps, path, 0, 0, err) == 0) {
        read_set(ps);
        probe_set_free(ps);
    }
    if (probe_set_load(&ps, path, 256, 256, err) == 0) {
        read_set(ps);
        probe_set_free(ps);
    }
    return 0;
}
