/* The model summary of `./train --dry-run`: tensor table, exact parameter count, FLOPs per
 * token at the configured sequence length, and the memory plan (per rank). */
#ifndef PHASELAB_SUMMARY_H
#define PHASELAB_SUMMARY_H
#include <stdio.h>
#include "trainer/run_config.h"
int print_model_summary(FILE *f, const Config *cfg, int world, char *err);
#endif
