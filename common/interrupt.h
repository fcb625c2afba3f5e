/* Interruptible work (the analyses of ./train --eval): SIGINT and SIGTERM set a flag that the
 * long loops poll between batches (trainer/probe_eval.c, trainer/evaluate.c, the filler sweep
 * of analysis/filler_sweep.c); a loop that sees it stops with an error "interrupted by signal
 * N ...: nothing written", its caller writes nothing, and the program exits 128 + N (130 for
 * SIGINT, 143 for SIGTERM). The handler only records the signal and re-arms the default
 * action, so a second signal ends the process at once. Without interrupt_install (training,
 * whose own handler checkpoints: trainer/trainer.c) interrupt_signal() stays 0. */
#ifndef PHASELAB_INTERRUPT_H
#define PHASELAB_INTERRUPT_H

/* SIGINT and SIGTERM set the flag (SA_RESETHAND: the second one is fatal). */
void interrupt_install(void);
/* 0, or the signal that asked the work to stop. Async-signal-safe to read. */
int interrupt_signal(void);
#endif
