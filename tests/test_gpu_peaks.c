/* The MFU denominator per GPU variant (kernels/gpu_peaks.c): vendor dense bf16 figures typed in
 * here from the data sheets, for the device names CUDA reports; unknown names get the SM x clock
 * estimate and say so. */
#include <math.h>
#include "tests/check.h"
#include "kernels/gpu_peaks.h"

static void expect(const char *name, double tflops) {
    int est = -1;
    double got = gpu_peak_bf16_flops(name, 9, 132, 1.98e9, &est) / 1e12;
    check(fabs(got - tflops) < 0.5 && est == 0, name, "got %.1f TFLOP/s (estimated %d), expected %.1f", got, est, tflops);
}

int main(void) {
    expect("NVIDIA H100 80GB HBM3", 989.4);   /* SXM */
    expect("NVIDIA H100 PCIe", 756.5);
    expect("NVIDIA H100 NVL", 835.5);
    expect("NVIDIA H200", 989.4);
    expect("NVIDIA H200 NVL", 835.5);
    expect("NVIDIA GH200 480GB", 989.4);
    expect("NVIDIA H20", 148.0);
    expect("NVIDIA A100-SXM4-80GB", 312.0);
    expect("NVIDIA A100-PCIE-40GB", 312.0);
    expect("NVIDIA A10", 125.0);
    expect("NVIDIA L40S", 362.1);
    expect("NVIDIA L40", 181.0);
    expect("NVIDIA L4", 121.0);
    expect("NVIDIA B200", 2250.0);
    int est = 0;
    double g = gpu_peak_bf16_flops("Some Future GPU", 9, 100, 2.0e9, &est);
    check(est == 1 && fabs(g - 100 * 2.0e9 * 2048.0) < 1, "unknown name: SM x clock x 2048 estimate, flagged", "%g est %d", g, est);
    g = gpu_peak_bf16_flops("Old GPU", 8, 10, 1.0e9, &est);
    check(est == 1 && fabs(g - 10 * 1.0e9 * 1024.0) < 1, "unknown pre-Hopper name: x 1024 per SM", "%g", g);
    return 0;
}
