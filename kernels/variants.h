/* The model variants of docs/spec.md §2 and §2b, one enum per config key, written once.
 *
 * These constants are what the config parser stores (trainer/run_config.c: the value of key k is the
 * index of its word in config_K_names[], trainer/run_config.h) and what the kernels read from their
 * shapes (CompShape.gate, AttnShape.grid, kernels/kernels.h): the same names from the INI to the
 * kernels. Header-only and free of code, so that C, nvcc and the CUDA emulator (g++) include it
 * alike (through kernels/visibility.h, the kernels' one other model/ header).
 *
 * Not mirrored here on purpose: VIS_FULL | VIS_WINDOW | VIS_TAIL (kernels/visibility.h) is the
 * raw-token visibility a query has, derived from two keys (attention x local, config_visibility),
 * not a config key of its own. */
#ifndef PHASELAB_VARIANTS_H
#define PHASELAB_VARIANTS_H

/* model.attention (full | compressed); ATTN_WINDOW is a layer's attention only, never the key's
 * value: a raw sliding window of n_local tokens and no compressed entries (the `window` kind of
 * model.layer_attention, model/layer_kinds.h, docs/spec.md §5) */
enum { ATTN_FULL = 0, ATTN_COMPRESSED = 1, ATTN_WINDOW = 2 };
/* model.gate: alpha over a window's W offsets is softmax over offsets of a scalar (c = 1) or
 * per-channel (c = d) logit, or uniform 1/W (no gate weights) */
enum { GATE_SCALAR = 0, GATE_VECTOR = 1, GATE_UNIFORM = 2 };
/* model.local: raw tokens a compressed query sees: the last n_local, or those after its last
 * visible window */
enum { LOCAL_WINDOW = 0, LOCAL_TAIL = 1 };
/* model.compressor: maps per branch W (paper), 2 (deepseek, implies tied K/V), 1 (shared) */
enum { COMPRESSOR_PAPER = 0, COMPRESSOR_DEEPSEEK = 1, COMPRESSOR_SHARED = 2 };
/* model.grid: KV head g's windows start at o_g = 0 (aligned) or floor(g S / G) (staggered) */
enum { GRID_ALIGNED = 0, GRID_STAGGERED = 1 };
/* model.boundaries: entries end on the window grid (grid) or where a learned per-token score
 * decides (learned: content-defined chunks, docs/spec.md §6.5) */
enum { BOUNDARIES_GRID = 0, BOUNDARIES_LEARNED = 1 };
#endif
