/* The causal analyses of a checkpoint (docs/spec.md §4), driven from ./train --eval:
 *
 *   ./train --eval CKPT --probe FILE --gate-cycle DELTA|all [--layers L1,L2] [--out FILE]
 *   ./train --eval CKPT --probe FILE --knockout L:H|all [--calib FILE] [--out FILE]
 *   ./train --eval CKPT --filler-sweep SPEC_FILE [--out FILE]
 *
 * Each prints its table and appends one group to the analysis file (default CKPT/analysis.h5,
 * layout in analysis/analysis_h5.h). Bad input (a flag the checkpoint cannot take, a probe or
 * sweep file that does not fit the model's vocabulary or T, a calibration set equal to the
 * evaluated set) gives one line naming the file or flag and what is allowed, exit 2, and
 * writes nothing. */
#ifndef PHASELAB_ANALYSIS_H
#define PHASELAB_ANALYSIS_H
#include "trainer/probe_eval.h"

/* 1 when argv (the arguments after --eval) asks for an analysis flag handled here. */
int analysis_requested(int argc, char **argv);
/* Runs it; argv[0] = CKPT. Returns the exit status. */
int analysis_main(int argc, char **argv);

/* Stores a probe evaluation (lookup or needle) as a new /probe_NNN group of path; used by plain
 * ./train --eval. Returns 0, or -1 with err. */
int analysis_store_probe(const char *path, const char *ckpt, long step, const char *probe_path, int layout,
                         const ProbeResult *pr, char *err);
#endif
