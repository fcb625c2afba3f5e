/* The CUDA backend's shape limits (issue 37: the config's maxima work everywhere or are refused
 * clearly). Its attention kernels take head_dim <= 128 (padded_dim in cuda_attention.cu) and its
 * compressor at most 64 KV heads (the CompSlice table of cuda_compressor.cu); beyond them an op
 * used to abort the process in the first step (cu_fail). model_create now refuses the config with
 * one line naming the key and the limit (Backend.max_head_dim / max_comp_kv_heads), and a config
 * at the limits is still accepted:
 *   head_dim 256 (full attention)               refused, "head_dim" and "128" in the message
 *   compressed W4/S4 with 128 KV heads          refused, "n_kv_heads" and "64"
 *   head_dim 128 full, compressed with 64 KV heads   created
 *   compressed with model.head_strides = 4,2       created (docs/spec.md §6.4: the CUDA kernels take
 *                                                  a stride per KV head; no longer refused)
 *   compressed with model.boundaries = learned     created on both backends (docs/spec.md §6.5: the CUDA
 *                                                  kernels take entry ends, Backend.boundaries = 1; no longer refused)
 * The CPU backend has no such limit (a head_dim 256 model is created there). Without a GPU (or
 * a CUDA build) the CUDA checks print skip lines; the emulator build (tests/cuemu) runs them. */
#include <stdio.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

static void expect(const Backend *be, const ModelConfig *c, int accepted, const char *name, const char *words1,
                   const char *words2) {
    char err[ERR_LEN] = "";
    Model *m = model_create(c, be, 1, 8, err);
    if (accepted) check(m != NULL, name, "refused: %s", err);
    else check(!m && strstr(err, words1) && strstr(err, words2), name, "%s", m ? "created" : err);
    model_free(m);
}

int main(void) {
    ModelConfig big_d = tu_tiny_config();
    big_d.head_dim = 256;
    big_d.rope_dims = 256;
    ModelConfig many_g = tu_tiny_config();
    many_g.attention = ATTN_COMPRESSED;
    many_g.n_heads = 128;
    many_g.n_kv_heads = 128;
    ModelConfig at_d = tu_tiny_config();
    at_d.head_dim = 128;
    at_d.rope_dims = 128;
    ModelConfig at_g = many_g;
    at_g.n_heads = 64;
    at_g.n_kv_heads = 64;
    ModelConfig multirate = tu_tiny_config();
    multirate.attention = ATTN_COMPRESSED;
    multirate.stride = 2;
    snprintf(multirate.head_strides, sizeof multirate.head_strides, "4,2");

    expect(backend_cpu(1), &big_d, 1, "the cpu backend takes head_dim 256", "", "");
    expect(backend_cpu(1), &multirate, 1, "the cpu backend takes head_strides 4,2", "", "");
    ModelConfig learned = tu_tiny_config();
    tu_bd(&learned);
    expect(backend_cpu(1), &learned, 1, "the cpu backend takes boundaries = learned", "", "");
#ifndef PHASELAB_CUDA
    check_skip("cuda limits", "no GPU (built without CUDA)");
#else
    char err[ERR_LEN] = "";
    const Backend *gpu = backend_cuda(0, err);
    if (!gpu) {
        check_skip("cuda limits", "no GPU");
        return check_failures ? 1 : 0;
    }
    expect(gpu, &big_d, 0, "cuda refuses head_dim 256 at model creation, naming head_dim and 128", "head_dim", "128");
    expect(gpu, &many_g, 0, "cuda refuses a compressor with 128 KV heads, naming n_kv_heads and 64", "n_kv_heads", "64");
    expect(gpu, &at_d, 1, "cuda takes head_dim 128", "", "");
    expect(gpu, &at_g, 1, "cuda takes a compressor with 64 KV heads", "", "");
    expect(gpu, &multirate, 1, "cuda takes head_strides 4,2 (multi-rate strides)", "", "");
    expect(gpu, &learned, 1, "cuda takes boundaries = learned (learned chunk boundaries)", "", "");
#endif
    return check_failures ? 1 : 0;
}
