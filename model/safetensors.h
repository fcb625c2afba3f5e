/* safetensors I/O for the tensor table (the HuggingFace format): an 8-byte little-endian header
 * length n, n bytes of JSON {"__metadata__": {...}, NAME: {"dtype": "F32", "shape": [...],
 * "data_offsets": [begin, end]}, ...} padded with spaces to a multiple of 8, then the raw data.
 * phaselab writes F32 in tensor-table order; the reader accepts F32 and BF16 and requires every
 * table tensor with its exact shape and no tensor the table does not know. */
#ifndef PHASELAB_SAFETENSORS_H
#define PHASELAB_SAFETENSORS_H
#include "model/tensors.h"

/* host_params [tt->n_floats]; metadata: NULL or pairs {key, value, key, value, ..., NULL} */
int safetensors_write(const char *path, const TensorTable *tt, const float *host_params,
                      const char *const *metadata, char *err);
int safetensors_read(const char *path, const TensorTable *tt, float *host_params, char *err);
#endif
