/* A checkpoint opened for reading its model: ./train --eval, every analysis and --generate. Either
 * a training checkpoint (trainer/checkpoint.h) or a weights-only directory holding config.json +
 * model.safetensors (+ tokenizer.json): the HuggingFace directory phaselab exports (a checkpoint
 * without optimizer/ and state.json) or what transformers' save_pretrained writes back.
 *
 *   config     config.ini when present; else built from config.json: hidden_size,
 *              intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 *              head_dim, vocab_size, rope_theta (or rope_parameters.rope_theta), rms_norm_eps,
 *              tie_word_embeddings; model_type "qwen3" is full attention with qk_norm and RoPE
 *              on every dim, model_type "phaselab" takes the variant keys of its "phaselab"
 *              object; data.seq_len = phaselab_seq_len (without it data.seq_len=T must be given).
 *              Then the command line's section.key=value overrides.
 *   state      state.json when present: verified at load as for a resume, except that the
 *              optimizer shards are neither needed nor checked (checkpoint_read_state_weights):
 *              a damaged checkpoint is still refused. Absent: weights only; the safetensors
 *              header is all that is checked, the step is the phaselab_step of its metadata (or
 *              -1), and ckpt_source_open says so in one line "weights-only checkpoint: ...".
 *   tokenizer  the fingerprint of the token ids the model was trained on (as shards and probe
 *              sets record it: sha256 of tokenizer.json, "bytes", "synthetic"): config.json's
 *              phaselab_tokenizer_fingerprint, else what its phaselab_vocabulary text names
 *              (checkpoints from before that key), else the sha256 of the directory's
 *              tokenizer.json, else the header of the first training shard (data.train of the
 *              checkpoint's config); "" when nothing says (inputs are then not checked, with a
 *              note).
 *   paths      a relative path of the checkpoint's own config (data.val, eval.probe) is taken
 *              relative to the run's directory recorded in state.json (working_dir); a value
 *              given on the command line (an override, --probe) relative to the current
 *              directory. Every command resolves them through ckpt_source_path.
 * Informational lines go to the FILE *say given (NULL: none); errors fill err. Returns: 0, -2
 * for bad input (exit 2: not a checkpoint, a bad config, an input that does not belong to this
 * checkpoint), -1 for a runtime failure (exit 1: damaged checkpoint, out of memory). */
#ifndef PHASELAB_CKPT_SOURCE_H
#define PHASELAB_CKPT_SOURCE_H
#include <stdio.h>
#include "data/probe.h"
#include "trainer/checkpoint.h"
#include "trainer/run_config.h"

struct Model;

typedef struct {
    char *dir;                  /* as given */
    char *config_path;          /* DIR/config.ini or DIR/config.json: what the config came from */
    Config cfg;                 /* the checkpoint's config with the command line's overrides */
    Config saved;               /* the same without overrides: which values are the checkpoint's */
    int has_state;              /* state.json present (0: weights only) */
    TrainState st;              /* after ckpt_source_load (weights only: step from the metadata or -1) */
    char *run_dir;              /* state.json's working_dir, NULL when none is recorded */
    char tokenizer_fp[65];      /* "" = unknown */
    char *tokenizer_fp_source;  /* the file that says it */
    char *tokenizer_json;       /* DIR/tokenizer.json when present, else NULL */
    char *overrides;            /* the command line's section.key=value overrides, space-separated ("" = none):
                                   every analysis group records them (attribute "overrides") */
} CkptSource;

int ckpt_source_open(CkptSource *c, const char *dir, int n_overrides, char **overrides, FILE *say, char *err);
void ckpt_source_close(CkptSource *c);
/* Loads (and, with a state.json, verifies) the weights into m; fills c->st. 0 or -1. */
int ckpt_source_load(CkptSource *c, struct Model *m, char *err);

/* The path to use for a path-valued key of the config (value = c->cfg's, saved_value = c->saved's;
 * key names it in the line said when it was resolved against the run's directory). malloc'd;
 * NULL when out of memory. */
char *ckpt_source_path(const CkptSource *c, const char *key, const char *value, const char *saved_value, FILE *say);
/* data.val resolved: *glob_out (malloc'd) or NULL when the config has none. -2 when it matches no
 * file (err names the config, the glob, where it looked and data.val=GLOB), except the data.val
 * of a weights-only directory's own config, which is dropped with a line said. */
int ckpt_source_val(const CkptSource *c, char **glob_out, FILE *say, char *err);
/* The probe set: probe_arg (--probe, relative to the current directory) or eval.probe resolved;
 * *path_out (malloc'd) or NULL when neither. -2 when it cannot be read (as for data.val). */
int ckpt_source_probe_path(const CkptSource *c, const char *probe_arg, char **path_out, FILE *say, char *err);

/* An input made with the tokenizer of fingerprint fp (what: "--probe", "--calib", "data.val", ...,
 * file: its path) against the checkpoint's: -2 with one line naming both files and both
 * fingerprints when they differ; 0 when equal or when either is unknown (said). */
int ckpt_source_check_tokenizer(const CkptSource *c, const char *what, const char *file, const char *fp, FILE *say,
                                char *err);
/* The same for a text tokenizer (--generate --tokenizer, a filler-sweep file's tokenizer): also
 * accepted, with a line said, is the byte tokenizer on a synthetic-vocabulary checkpoint (that
 * vocabulary has no text; bytes only type its ids). */
int ckpt_source_check_text_tokenizer(const CkptSource *c, const char *what, const char *file, const char *fp, FILE *say,
                                     char *err);
/* A probe set against the checkpoint: its tokenizer fingerprint (vocabulary and prompt length
 * are checked by probe_set_load against the config's vocab_size and seq_len). */
int ckpt_source_check_probe(const CkptSource *c, const char *what, const ProbeSet *ps, FILE *say, char *err);
#endif
