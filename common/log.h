/* Run log: every line goes to stdout and, once a run directory is open, to RUN/log.txt
 * (rank 0 only; other ranks stay silent except for errors, which go to stderr). */
#ifndef PHASELAB_LOG_H
#define PHASELAB_LOG_H
int log_open(const char *path, char *err);
void log_close(void);
void log_set_quiet(int quiet);     /* non-zero on ranks other than 0 */
void log_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An error line to stderr and the log file: "phaselab: ..." */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "1h02m03s" style durations */
void format_duration(double seconds, char *out, int len);
#endif
