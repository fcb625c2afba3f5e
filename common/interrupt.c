/* The interrupt flag of common/interrupt.h: a sig_atomic_t written by the handler only. */
#include <signal.h>
#include <string.h>
#include "common/interrupt.h"

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) { interrupted = sig; }

void interrupt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;   /* a read in progress completes; the next signal kills */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int interrupt_signal(void) { return interrupted; }
