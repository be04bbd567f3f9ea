/* Errors, option parsing, number parsing and JSON output for the CLI. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* exactly one line, whatever a path or a library message contains */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    fflush(stdout);
    if (cmd) fprintf(stderr, "todre %s: %s\n", cmd, msg);
    else fprintf(stderr, "todre: %s\n", msg);
    return CLI_EXIT_ERROR;
}

int cli_lib_fail(const char *cmd, const char *what, todre_status st)
{
    const char *detail = todre_last_error();
    if (detail && *detail)
        return cli_fail(cmd, "%s: %s: %s", what, todre_status_string(st), detail);
    return cli_fail(cmd, "%s: %s", what, todre_status_string(st));
}

struct cli_opt *cli_opt(struct cli_opt *opts, size_t nopts, const char *name)
{
    for (size_t i = 0; i < nopts; i++)
        if (!strcmp(opts[i].name, name)) return &opts[i];
    return NULL;
}

static struct cli_opt *find_opt(struct cli_opt *opts, size_t nopts, const char *arg, size_t len)
{
    for (size_t i = 0; i < nopts; i++)
        if (strlen(opts[i].name) == len && !strncmp(opts[i].name, arg, len)) return &opts[i];
    return NULL;
}

int cli_parse_opts(const char *cmd, int argc, char **argv, struct cli_opt *opts, size_t nopts)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return cli_fail(cmd, "unexpected argument '%s' (options start with --; see todre "
                            "%s --help)", arg, cmd);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        struct cli_opt *o = find_opt(opts, nopts, arg, len);
        if (!o)
            return cli_fail(cmd, "unknown option '%.*s' (see todre %s --help)", (int)len, arg,
                            cmd);
        if (o->given) return cli_fail(cmd, "option %s given more than once", o->name);
        o->given = 1;
        if (!o->takes_value) {
            if (eq) return cli_fail(cmd, "option %s takes no value", o->name);
            o->value = "";
            continue;
        }
        if (eq) {
            o->value = eq + 1;
        } else {
            /* "--keep --json" is a forgotten value, not the value "--json" */
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
                return cli_fail(cmd, "option %s needs a value", o->name);
            o->value = argv[++i];
        }
    }
    return 0;
}

int cli_parse_i64(const char *cmd, const char *opt, const char *s, int64_t *out)
{
    char *end = NULL;
    /* strtoll skips leading blanks and accepts "+5"; neither is a number here */
    if (!s || !*s || !((*s >= '0' && *s <= '9') || *s == '-'))
        return cli_fail(cmd, "%s: '%s' is not an integer", opt, s ? s : "");
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') return cli_fail(cmd, "%s: '%s' is not an integer", opt, s);
    if (errno == ERANGE)
        return cli_fail(cmd, "%s: '%s' is out of range", opt, s);
    *out = (int64_t)v;
    return 0;
}

int cli_parse_f64(const char *cmd, const char *opt, const char *s, double *out)
{
    char *end = NULL;
    if (!s || !*s || !((*s >= '0' && *s <= '9') || *s == '-' || *s == '.'))
        return cli_fail(cmd, "%s: '%s' is not a number", opt, s ? s : "");
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0') return cli_fail(cmd, "%s: '%s' is not a number", opt, s);
    if (errno == ERANGE || !isfinite(v))
        return cli_fail(cmd, "%s: '%s' is out of range", opt, s);
    *out = v;
    return 0;
}

int cli_parse_choice(const char *cmd, const char *opt, const char *s, const char *const *names,
                     int count, int *out)
{
    char accepted[256];
    size_t n = 0;
    accepted[0] = '\0';
    for (int i = 0; i < count; i++) {
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
        int w = snprintf(accepted + n, sizeof accepted - n, "%s%s", i ? "|" : "", names[i]);
        if (w > 0 && (size_t)w < sizeof accepted - n) n += (size_t)w;
    }
    return cli_fail(cmd, "%s: '%s' is not one of %s", opt, s, accepted);
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void cli_json_double(FILE *f, double v)
{
    /* the shortest of 15..17 significant digits that reads back exactly */
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

int cli_finish_output(const char *cmd)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail(cmd, "cannot write the output: %s", strerror(errno));
    return 0;
}
