/*
 * Internals of the `todre` command-line tool: shared by main.c and the
 * cli_*.c files, one per concern. Every error path of the tool ends in
 * cli_fail() (or cli_lib_fail()), which prints exactly one line on stderr and
 * yields the exit status 2.
 */
#ifndef TODRE_TOOLS_CLI_H
#define TODRE_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "npy.h"
#include "todre/todre.h"

#define CLI_EXIT_ERROR 2

/* ---- errors (cli_args.c) ------------------------------------------------ */

/* Print "todre <cmd>: <message>" as one line on stderr; @return CLI_EXIT_ERROR. */
int cli_fail(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Report a failed library call: "<what>: <status>: <todre_last_error()>". */
int cli_lib_fail(const char *cmd, const char *what, todre_status st);

/* ---- options (cli_args.c) ----------------------------------------------- */

struct cli_opt {
    const char *name;  /* "--keep" */
    int takes_value;   /* 0 for flags such as --json */
    const char *value; /* set by cli_parse_opts; "" for a flag that was given */
    int given;
};

/* Parse "--name value", "--name=value" and flags into @p opts. Rejects
 * unknown options, positional arguments, missing values and repeats.
 * @return 0, or CLI_EXIT_ERROR after printing the error. */
int cli_parse_opts(const char *cmd, int argc, char **argv, struct cli_opt *opts, size_t nopts);

/* The option named @p name in @p opts (which must list it). */
struct cli_opt *cli_opt(struct cli_opt *opts, size_t nopts, const char *name);

/* Whole-string numbers: no blanks, no trailing characters, no overflow;
 * doubles must be finite. @return 0 or CLI_EXIT_ERROR (printed). */
int cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t *out);
int cli_parse_f64(const char *cmd, const char *opt, const char *s, double *out);

/* Index of @p s in @p names (count entries) or CLI_EXIT_ERROR (printed, with
 * the accepted values). */
int cli_parse_choice(const char *cmd, const char *opt, const char *s, const char *const *names,
                     int count, int *out);

/* ---- output (cli_args.c) ------------------------------------------------ */

/* Write @p s as a JSON string literal (quoted, escaped). */
void cli_json_string(FILE *f, const char *s);

/* Write a finite double as a JSON number that reads back exactly. */
void cli_json_double(FILE *f, double v);

/* Flush stdout; a failed write (full disk, closed pipe) is an error. */
int cli_finish_output(const char *cmd);

/* ---- arrays (cli_arrays.c) ---------------------------------------------- */

/* Load a .npy file; errors are printed ("todre <cmd>: --opt: <reason>"). */
int cli_load(const char *cmd, const char *opt, const char *path, struct todre_npy *out);

/* The libtodre dtype of a float array ("<f4" or "<f2"), or CLI_EXIT_ERROR
 * (printed) for anything else. */
int cli_float_dtype(const char *cmd, const char *opt, const struct todre_npy *a,
                    todre_dtype *out);

/* ---- backend and device memory (cli_device.c) --------------------------- */

#define CLI_MAX_BUFFERS 8

/* A context plus the device copies made for it. On a CUDA context, host
 * arrays are copied to device memory through the CUDA driver API, loaded
 * with dlopen so that the tool runs on machines without CUDA. */
struct cli_run {
    todre_context *ctx;
    todre_backend_kind backend; /* CPU or CUDA: what the context runs on */
    unsigned long long dev[CLI_MAX_BUFFERS]; /* device copies (CUDA only; CUdeviceptr) */
    const void *host[CLI_MAX_BUFFERS];   /* the host arrays they mirror */
    todre_tensor *tensors[CLI_MAX_BUFFERS];
    int count;
};

/* Create the context for --backend (0 auto, 1 cpu, 2 cuda). AUTO falls back
 * to the CPU when CUDA cannot run (including when the tool cannot load the
 * CUDA driver library). */
int cli_run_open(const char *cmd, todre_backend_kind kind, struct cli_run *run);

/* A tensor over @p host data (C order), copied to the device on CUDA. The
 * run owns the tensor. @p name names it in errors. */
int cli_run_tensor(const char *cmd, struct cli_run *run, const char *name, const void *host,
                   todre_dtype dtype, int rank, const int64_t *shape, todre_tensor **out);

/* Copy @p bytes of tensor @p t's memory into @p host (a no-op copy on CPU). */
int cli_run_fetch(const char *cmd, struct cli_run *run, const todre_tensor *t, void *host,
                  size_t bytes);

void cli_run_close(struct cli_run *run);

/* "cpu" or "cuda". */
const char *cli_backend_name(todre_backend_kind kind);

/* ---- commands ------------------------------------------------------------ */

int cli_select_main(int argc, char **argv);
int cli_relevance_main(int argc, char **argv);
int cli_info_main(int argc, char **argv);

#endif /* TODRE_TOOLS_CLI_H */
