/* Peak dense bf16 throughput per GPU variant (the rule: kernels/gpu_peaks.h). */
#include <string.h>
#include "kernels/gpu_peaks.h"

typedef struct { const char *name_part; double tflops; } PeakRow;

/* Most specific first: a row's name_part must not be matched by a variant listed after it. */
static const PeakRow peaks[] = {
    {"GH200", 989.4},     {"GB200", 2500.0},    {"B200", 2250.0},     {"B100", 1750.0},
    {"H100 PCIe", 756.5}, {"H100 NVL", 835.5},  {"H100", 989.4},      /* H100 SXM: "H100 80GB HBM3" */
    {"H200 NVL", 835.5},  {"H200", 989.4},      {"H800 PCIe", 756.5}, {"H800", 989.4},
    {"H20", 148.0},
    {"A100", 312.0},      {"A800", 312.0},      {"A30", 165.0},       {"A40", 149.7},
    {"A10G", 70.0},       {"A10", 125.0},       {"RTX A6000", 154.8},
    {"L40S", 362.1},      {"L40", 181.0},       {"L4", 121.0},
    {"RTX 4090", 165.2},  {"RTX 3090", 71.0},
};

double gpu_peak_bf16_flops(const char *device_name, int cc_major, int n_sms, double clock_hz, int *estimated) {
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
        if (device_name && strstr(device_name, peaks[i].name_part)) {
            if (estimated) *estimated = 0;
            return peaks[i].tflops * 1e12;
        }
    if (estimated) *estimated = 1;
    const double per_sm_per_cycle = cc_major >= 9 ? 2048.0 : 1024.0;
    return (double)n_sms * clock_hz * per_sm_per_cycle;
}
