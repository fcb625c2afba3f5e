/* Run log: every line goes to stdout and, once a run directory is open, to RUN/log.txt
 * (rank 0 only; other ranks stay silent except for errors, which go to stderr). */
#ifndef PHASELAB_LOG_H
#define PHASELAB_LOG_H
int log_open(const char *path, char *err);
void log_close(void);
void log_set_quiet(int quiet);     /* non-zero on ranks other than 0 */
/* After a stop signal the console may have no reader: Open MPI's mpirun stops draining the
 * ranks' stdout once it has forwarded a SIGTERM, and rank 0 then blocked in write(2) on the full
 * pty, never reaching the checkpoint nor the collective rank 1 waited in, until mpirun's SIGKILL
 * (seen in CI, tests/test_mpi_train.py: no checkpoint). From this call on, console lines are
 * written only as far as the console takes them within 100 ms, the rest dropped; RUN/log.txt
 * still gets every line. Async-signal-safe (the stop signal's handler calls it). */
void log_guard_console(void);
void log_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An error line to stderr and the log file: "phaselab: ..." */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "1h02m03s" style durations */
void format_duration(double seconds, char *out, int len);
#endif
