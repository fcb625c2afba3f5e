/* The training program: run directory, data, model, optimizer, resume, the loop, evaluation,
 * metrics, checkpoints, pre-emption signals. See trainer/trainer.c for the step-by-step story. */
#ifndef PHASELAB_TRAINER_H
#define PHASELAB_TRAINER_H
#include "trainer/run_config.h"

struct Comm;
/* Trains cfg to cfg->train.steps (resuming from the run's newest checkpoint). Returns the exit
 * status: 0 done or stopped by a signal after a checkpoint, 1 runtime error, 2 bad config or
 * refused resume, 3 too many non-finite steps in a row. */
int train_main(Config *cfg, struct Comm *comm, const char *code_version);
#endif
