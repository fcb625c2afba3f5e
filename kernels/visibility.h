/* The visibility rule of compressed attention (docs/spec.md §2.5, §2b.2 and §6.1), written once
 * as inline functions usable from C (model, CPU kernels, config), CUDA (nvcc) and the CUDA
 * emulator (g++). Every place that needs to know which compressed entries and raw tokens a
 * query sees calls these; nothing else re-derives the rule.
 *
 * The rule. Compressed entry j of a grid with offset o pools the window o + jS .. o + jS + W - 1
 * and ENDS at its last token
 *     e_j = o + jS + W - 1                                        (vis_entry_end)
 * Entry j is visible to query t iff e_j <= t (the entry is complete), and exists in a sequence of
 * T tokens iff e_j <= T - 1. Everything below is this one statement solved for n, t or j.
 *
 * The offset (vis_entry_offset) is one sum, the same mechanism for every source of it:
 *     o = o_base + o_g + u_b
 *   o_base  a static offset of the layer (ModelDims.grid_base, set by dims_of: S - W on csa layers of a
 *           layer schedule, docs/spec.md §5.4; 0 for every grid of §2/§2b). It may
 *           be negative, down to 1 - W: window 0 then starts before position 0 and holds only its
 *           slots i >= -o (vis_window_first_slot); e.g. DeepSeek-V4's CSA geometry (W = 2S, entry
 *           j pools 4j-4..4j+3, visible iff j < (t+1) div 4) is o_base = S - W = -S
 *   o_g     the KV head's stagger: 0 (grid = aligned) or floor(g S / G) (grid = staggered)
 *   u_b     a per-sequence shift (phase jitter, docs/spec.md §6.2; 0 at evaluation and whenever no
 *           shift array is given), taken mod the head's stride: u_b is drawn in [0, P) with P = S,
 *           or with multi-rate strides P = lcm of the S_g, and KV head g moves by u_b mod S_g
 *           (a single stride: u_b < S, so u_b itself)
 * With o_base = u_b = 0 every formula is the one of §2 / §2b.2 bit for bit (integer arithmetic
 * only, o >= 0). All functions below are valid for any o > -W (so e_0 >= 0).
 *
 * A query at t reading a grid with offset o and nW entries sees
 *   compressed entries j < vis_n_entries(t)   (e_j <= t)
 *   raw tokens s in [vis_raw_lo(t), t]:  full: 0;  window: t - n_local + 1 (clamped to 0);
 *                                        tail: e_{n-1} + 1 (the end of its last visible entry;
 *                                        0 when it sees none).
 * The phase of t on that grid is (t - o) mod S. An entry's RoPE position is o - o_base + jS
 * (vis_entry_position): the static offset does not move it.
 *
 * Multi-rate strides (model.head_strides, docs/spec.md §6.4): KV head g has its own stride S_g
 * (vis_head_stride); every function below is then called with S = S_g for that head, so the rule
 * stays one statement: e_j = o + j S_g + W - 1. */
#ifndef PHASELAB_VISIBILITY_H
#define PHASELAB_VISIBILITY_H
#include "kernels/variants.h"   /* GRID_ALIGNED | GRID_STAGGERED: the grid of the KV heads' windows */

#if defined(__CUDACC__)
#define VIS_FN __host__ __device__ static inline
#else
#define VIS_FN static inline
#endif

/* Which raw tokens a query sees (docs/spec.md §2): */
enum { VIS_FULL = 0,     /* causal full attention: s <= t */
       VIS_WINDOW = 1,   /* t - n_local + 1 <= s <= t */
       VIS_TAIL = 2 };   /* e_t < s <= t, e_t = end of the last visible window (or -1) */

/* S_g: KV head g's stride, head_stride[g] (model.head_strides, docs/spec.md §6.4), or S for every
 * head when head_stride is NULL (every model of §2-§6.3). Every consumer of the rule reads a head's
 * stride here and passes it as S to the functions below. */
VIS_FN int vis_head_stride(const int *head_stride, int g, int S) { return head_stride ? head_stride[g] : S; }

/* o_g: KV head g's stagger, the head's part of the offset (0 on the aligned grid). */
VIS_FN int vis_grid_offset(int grid, int g, int S, int G) {
    return grid == GRID_STAGGERED ? (int)(((long long)g * S) / G) : 0;
}

/* The offset o = o_base + o_g + (u_b mod S) of KV head g's grid (stride S = S_g) in a sequence with
 * shift u_b >= 0 (0: none; docs/spec.md §6.2: the shift is reduced mod the head's own stride, the
 * stagger plus shift is not). */
VIS_FN int vis_entry_offset(int grid, int g, int S, int G, int base, int shift) {
    return base + vis_grid_offset(grid, g, S, G) + (S > 0 ? shift % S : shift);
}

/* e_j: the last token of entry j on a grid with offset o (visible to t iff e_j <= t). */
VIS_FN int vis_entry_end(int j, int W, int S, int o) { return o + j * S + W - 1; }

/* The first slot of window j that is a real position: max(0, -(o + jS)); 0 unless o < 0 (only
 * window 0, and further ones only if S < -o). Slots i below it pool nothing. */
VIS_FN int vis_window_first_slot(int j, int S, int o) {
    int start = o + j * S;
    return start < 0 ? -start : 0;
}

/* The first window j >= 0 whose slot i is a real position (o + jS + i >= 0): 0 unless o + i < 0.
 * Windows j below it hold slot i masked (vis_window_first_slot(j) > i). */
VIS_FN int vis_first_window_of_slot(int i, int S, int o) {
    int before = -(o + i);
    return before > 0 ? (before + S - 1) / S : 0;
}

/* The RoPE position of entry j on a grid with offset o = o_base + o_g + u_b: o_g + u_b + jS, the
 * window start without the static offset (docs/spec.md §6.1). o_base moves which tokens an entry
 * pools and when it is visible, not its rotation: DeepSeek-V4's CSA (o_base = -S) rotates entry j
 * to jS, the start of its second block, and a partial window 0 is still rotated to position 0. */
VIS_FN int vis_entry_position(int j, int S, int o, int base) { return o - base + j * S; }

/* Entries of a grid with offset o in a sequence of T tokens: #{j >= 0 : e_j <= T - 1}. A shape
 * with no grid (W or S not positive: full attention, whose shapes may leave both 0) has none. */
VIS_FN int vis_n_windows(int T, int W, int S, int o) {
    return W > 0 && S > 0 && T - o >= W ? (T - o - W) / S + 1 : 0;
}

/* Compressed entries visible to query t (of nW the grid has): #{j < nW : e_j <= t}. */
VIS_FN int vis_n_entries(int t, int W, int S, int o, int nW) {
    if (nW <= 0 || t - o < W - 1) return 0;
    int n = (t - o - W + 1) / S + 1;
    return n < nW ? n : nW;
}

/* First raw token query t sees (the last is t itself), given the n = vis_n_entries(t) entries it
 * sees; visibility VIS_*. */
VIS_FN int vis_raw_lo(int visibility, int t, int n, int W, int S, int o, int n_local) {
    if (visibility == VIS_WINDOW) { int lo = t - n_local + 1; return lo < 0 ? 0 : lo; }
    if (visibility == VIS_TAIL) return n > 0 ? o + (n - 1) * S + W : 0;
    return 0;
}

/* What query t of a head with grid offset o and nW windows sees, in one call: compressed entries
 * 0..n_entries-1 and raw tokens raw_lo..t. The one helper every consumer of the rule uses (CPU
 * and CUDA attention, the decode cache's view, the model's FLOP count). */
typedef struct { int n_entries, raw_lo; } VisQueryView;
VIS_FN VisQueryView vis_query_view(int visibility, int t, int W, int S, int o, int nW, int n_local) {
    VisQueryView v;
    v.n_entries = vis_n_entries(t, W, S, o, nW);
    v.raw_lo = vis_raw_lo(visibility, t, v.n_entries, W, S, o, n_local);
    return v;
}

/* Learned chunk boundaries (model.boundaries = learned, docs/spec.md §6.5): the same statement with
 * an array of entry ends in place of o + jS + W - 1. A sequence's n entries end at ends[0] < ends[1]
 * < ... < ends[n-1] (strictly increasing: chunks do not overlap); query t sees the entries with
 * ends[j] <= t and, with local = tail, the raw tokens after the last of them. */
VIS_FN VisQueryView vis_query_view_ends(int visibility, int t, const int *ends, int n, int n_local) {
    int lo = 0, hi = n;                         /* #{j < n : ends[j] <= t}: binary search of the sorted ends */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ends[mid] <= t) lo = mid + 1;
        else hi = mid;
    }
    VisQueryView v;
    v.n_entries = lo;
    v.raw_lo = visibility == VIS_WINDOW ? (t - n_local + 1 < 0 ? 0 : t - n_local + 1)
             : visibility == VIS_TAIL ? (lo > 0 ? ends[lo - 1] + 1 : 0) : 0;
    return v;
}
/* Its inverse forms: the first query that sees entry j is its end, ends[j] (vis_first_query_of_entry
 * with the ends) ... */
VIS_FN int vis_first_query_of_entry_ends(int j, const int *ends) { return ends[j]; }
/* ... and the last query (of T) that sees raw token k: window: k + n_local - 1; tail: the query before
 * the first entry ending at or after k becomes visible (then k is inside a visible entry); full: T - 1. */
VIS_FN int vis_last_query_of_raw_ends(int visibility, int k, int T, const int *ends, int n, int n_local) {
    int hi = T - 1;
    if (visibility == VIS_WINDOW) {
        int last = k + n_local - 1;
        if (last < hi) hi = last;
    } else if (visibility == VIS_TAIL) {
        int lo = 0, up = n;                     /* first j with ends[j] >= k */
        while (lo < up) {
            int mid = lo + (up - lo) / 2;
            if (ends[mid] < k) lo = mid + 1;
            else up = mid;
        }
        if (lo < n && ends[lo] - 1 < hi) hi = ends[lo] - 1;
    }
    return hi;
}

/* The inverse rule, for kernels that walk keys and ask which queries see them:
 * the first query that sees entry j of a head with grid offset o (its window is complete) ... */
VIS_FN int vis_first_query_of_entry(int j, int W, int S, int o) { return o + j * S + W - 1; }
/* ... and the last query (of T) that sees raw token k (causal: the first is k itself), for a
 * head with grid offset o and nW windows: window: k + n_local - 1; tail: the query before the
 * first window ending at or after k closes (k is then inside a visible window); full: T - 1. */
VIS_FN int vis_last_query_of_raw(int visibility, int k, int T, int W, int S, int o, int n_local, int nW) {
    int hi = T - 1;
    if (visibility == VIS_WINDOW) {
        int last = k + n_local - 1;
        if (last < hi) hi = last;
    } else if (visibility == VIS_TAIL && nW > 0) {
        int x = k - o - W + 1;
        int jstar = x <= 0 ? 0 : (x + S - 1) / S;   /* first window ending at or after k */
        if (jstar < nW) {
            int last = o + jstar * S + W - 2;
            if (last < hi) hi = last;
        }
    }
    return hi;
}

/* Incremental decoding (model/decode.c), the same rule seen one position at a time:
 * the window of a head with grid offset o that completes at t (t = o + jS + W - 1), or -1 ... */
VIS_FN int vis_entry_closing_at(int t, int W, int S, int o) {
    int x = t - o - W + 1;
    return x >= 0 && x % S == 0 ? x / S : -1;
}
/* ... and the most raw tokens a query of that head sees with local = tail: before its first
 * window t + 1 <= o + W - 1 tokens (at t = o + W - 1 the window closes), after it t - e_t <= S - 1. */
VIS_FN int vis_tail_max_raw(int W, int S, int o) {
    return o + W - 1 > S - 1 ? o + W - 1 : S - 1;
}

/* Phase of position t for a head with grid offset o: (t - o) mod S, in 0..S-1. */
VIS_FN int vis_phase(int t, int S, int o) {
    int r = (t - o) % S;
    return r < 0 ? r + S : r;
}
#endif
