/* Backend choice at start-up: run.device = cpu | cuda | auto. auto takes CUDA when the binary
 * was built with it and a GPU answers, else the CPU (saying so in one line). */
#include <stdio.h>
#include <string.h>
#include "kernels/kernels.h"
#include "common/errors.h"

const Backend *backend_select(const char *device, int threads, int local_rank, char *err) {
    if (strcmp(device, "cpu") == 0) return backend_cpu(threads);
#ifdef PHASELAB_CUDA
    char cerr[ERR_LEN] = "";
    const Backend *be = backend_cuda(local_rank, cerr);
    if (be) return be;
    if (strcmp(device, "cuda") == 0) {
        set_err(err, "run.device = cuda but no usable GPU: %s", cerr);
        return NULL;
    }
    fprintf(stderr, "phaselab: no GPU available (%s); running on the CPU backend\n", cerr);
#else
    if (strcmp(device, "cuda") == 0) {
        set_err(err, "run.device = cuda but this ./train was built without CUDA (no nvcc at build time)");
        return NULL;
    }
#endif
    return backend_cpu(threads);
}
