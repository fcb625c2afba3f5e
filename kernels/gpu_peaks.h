/* Peak dense bf16 tensor-core throughput of a GPU, for MFU = achieved model FLOP/s / peak.
 *
 * A table of the vendor's dense (no sparsity) bf16 figures per device variant, matched on the
 * CUDA device name (cudaDeviceProp.name) most specific first: "H100 PCIe" 756 TFLOP/s is not
 * "H100" (SXM) 989, "H200 NVL" 836 is not "H200" 989. A name not in the table gets an estimate
 * from its SM count and clock: SMs x clock x dense bf16 FLOP per cycle per SM (2048 from
 * compute capability 9, 1024 before), flagged as an estimate. Plain C: the table is tested
 * without a GPU (tests/test_gpu_peaks.c). */
#ifndef PHASELAB_GPU_PEAKS_H
#define PHASELAB_GPU_PEAKS_H

/* FLOP/s; *estimated (may be NULL) is set to 1 when the name was not in the table. */
double gpu_peak_bf16_flops(const char *device_name, int cc_major, int n_sms, double clock_hz, int *estimated);
#endif
