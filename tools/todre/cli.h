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

/* The DLPack dtype of a float array ("<f4" or "<f2"), or CLI_EXIT_ERROR
 * (printed) for anything else. */
int cli_float_dtype(const char *cmd, const char *opt, const struct todre_npy *a,
                    DLDataType *out);

/* A compact host DLTensor view (strides NULL) of @p data; @p shape must
 * outlive @p t. */
void cli_host_tensor(DLTensor *t, void *data, DLDataType dtype, int ndim, int64_t *shape);

#define CLI_DTYPE_F32 ((DLDataType){kDLFloat, 32, 1})
#define CLI_DTYPE_F16 ((DLDataType){kDLFloat, 16, 1})
#define CLI_DTYPE_I32 ((DLDataType){kDLInt, 32, 1})
#define CLI_DTYPE_I64 ((DLDataType){kDLInt, 64, 1})
#define CLI_DTYPE_U8 ((DLDataType){kDLUInt, 8, 1})

/* ---- backend and device memory (cli_device.c) --------------------------- */

#define CLI_MAX_BUFFERS 8
#define CLI_MAX_RANK 4

/* One array the library reads or writes, on the context's device. */
struct cli_array {
    DLTensor t;                    /* the view passed to libtodre */
    int64_t shape[CLI_MAX_RANK];   /* t.shape points here */
    void *host;                    /* the host memory it mirrors */
    void *dev;                     /* todre_context_alloc() memory; NULL on a host device */
    const char *name;              /* names it in errors */
};

/* A context plus the arrays made for it. When the context's device is not
 * host memory (CUDA), host arrays are moved with todre_context_alloc() and
 * todre_context_copy(): the tool loads no device runtime itself. */
struct cli_run {
    todre_context *ctx;
    const char *backend; /* todre_context_backend(): what runs ("cpu", "cuda") */
    DLDevice device;     /* todre_context_device() */
    int on_host;         /* the device reads host memory: arrays are the host buffers */
    struct cli_array arrays[CLI_MAX_BUFFERS];
    int count;
};

/* Create the context for --backend NAME ("auto", "cpu", "cuda" or any
 * registered backend; device 0). "auto" is the library's: the first
 * available backend after the CPU, else the CPU. */
int cli_run_open(const char *cmd, const char *backend, struct cli_run *run);

/* A compact array of @p host data (C order) for the context's device: the
 * host memory itself on a host device, else a device copy. The run owns it.
 * @p name names it in errors. */
int cli_run_array(const char *cmd, struct cli_run *run, const char *name, void *host,
                  DLDataType dtype, int ndim, const int64_t *shape, const DLTensor **out);

/* Bring the contents of @p t, made by cli_run_array(), back into its host
 * memory (nothing to do on a host device). */
int cli_run_fetch(const char *cmd, struct cli_run *run, const DLTensor *t);

void cli_run_close(struct cli_run *run);

/* ---- commands ------------------------------------------------------------ */

int cli_select_main(int argc, char **argv);
int cli_relevance_main(int argc, char **argv);
int cli_info_main(int argc, char **argv);

#endif /* TODRE_TOOLS_CLI_H */
