/* The HuggingFace files of a checkpoint: config.json (Qwen3 or the phaselab custom model),
 * the model code for non-vanilla models, generation_config.json and the tokenizer files
 * (details in trainer/hf_export.c). */
#ifndef PHASELAB_HF_EXPORT_H
#define PHASELAB_HF_EXPORT_H
#include "trainer/run_config.h"

/* A plain Qwen3 (loads as Qwen3ForCausalLM): full attention, qk_norm, rope_dims = head_dim,
 * no attention sink. */
int hf_is_vanilla_qwen3(const ModelConfig *m);
/* Start-up (rank 0): reads the first training shard's tokenizer fingerprint and end-of-text id;
 * for shards made from a tokenizer.json finds that file (data.tokenizer, or next to the shards
 * or in their parent directory, checked by sha256). Error when it cannot be found. */
int hf_export_prepare(const Config *cfg, char *err);
/* config.json text (caller frees). */
char *hf_config_json(const ModelConfig *m, int T);
/* Writes config.json, the model code (non-vanilla), generation_config.json and the tokenizer
 * files (when hf_export_prepare found them) into dir. */
int hf_export_write(const char *dir, const ModelConfig *m, int T, char *err);
#endif
