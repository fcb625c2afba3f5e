/* The training program: run directory, data, model, optimizer, resume, the loop, evaluation,
 * metrics, checkpoints, pre-emption signals. See trainer/trainer.c for the step-by-step story. */
#ifndef PHASELAB_TRAINER_H
#define PHASELAB_TRAINER_H
#include "trainer/run_config.h"
#include "trainer/checkpoint.h"
#include "data/train_stages.h"

struct Comm;

/* The resume decision of a run directory, the same for the run and --dry-run. */
typedef struct {
    char ckpt[4096];          /* the newest complete checkpoint (when found) */
    TrainState st;            /* its state */
    long schedule_steps;      /* the total steps the learning-rate schedule is computed with from here */
} ResumePlan;
/* Finds the newest checkpoint of run_dir and checks that cfg continues it: the model, data (data's
 * fingerprint up to its step), batch and seed unchanged; train.steps not below its step; and a
 * train.steps other than the schedule total it recorded (state.json schedule_steps; older
 * checkpoints: their config.ini's train.steps) only with train.resume_schedule = keep (that total
 * stays) or stretch (the new train.steps). Returns 1 (found, plan filled), 0 (none: a new run,
 * schedule_steps = train.steps), -1 (the newest checkpoint is damaged: runtime failure) or -2 (a
 * refused resume), err naming the checkpoint. */
int train_resume_plan(const Config *cfg, const char *run_dir, const TrainData *data, ResumePlan *plan, char *err);
/* ./train --dry-run: every start-up check of the run, writing nothing: the run directory (could
 * it be created, is it in use), the inputs (trainer/run_inputs.h, for one rank) and the resume
 * decision. Prints (log_printf) what the run would log about them. Returns the exit status the
 * run would end with at start-up: 0, 1 (runtime failure) or 2 (bad input), err filled. */
int train_dry_run(const Config *cfg, ResumePlan *plan, char *err);
/* Trains cfg to cfg->train.steps (resuming from the run's newest checkpoint). Returns the exit
 * status: 0 done or stopped by a signal after a checkpoint, 1 runtime error, 2 bad config or
 * refused resume, 3 too many non-finite steps in a row. */
int train_main(Config *cfg, struct Comm *comm, const char *code_version);
/* SIGTERM, SIGUSR1 and SIGINT ask the run to stop with a checkpoint at the next step (train_main
 * installs it too; call it earlier, before MPI starts, so that no stop is lost while starting). */
void train_catch_stop_signals(void);
#endif
