/* `todre info`: the library version and which backends can run here. */
#include <string.h>

#include "cli.h"

static const char *const CMD = "info";

struct backend_state {
    const char *name;
    int available;
    char reason[512]; /* why not, when unavailable */
};

static void probe(todre_backend_kind kind, struct backend_state *b)
{
    int available = 0;
    todre_status st = todre_backend_available(kind, &available);
    b->name = cli_backend_name(kind);
    b->available = st == TODRE_OK && available;
    b->reason[0] = '\0';
    if (!b->available) {
        const char *why = todre_last_error();
        snprintf(b->reason, sizeof b->reason, "%s",
                 why && *why ? why : todre_status_string(st));
        for (char *p = b->reason; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
}

int cli_info_main(int argc, char **argv)
{
    struct cli_opt o[] = {{"--json", 0, 0, 0}};
    if (cli_parse_opts(CMD, argc, argv, o, 1)) return CLI_EXIT_ERROR;
    struct backend_state b[2];
    probe(TODRE_BACKEND_CPU, &b[0]);
    probe(TODRE_BACKEND_CUDA, &b[1]);
    if (o[0].given) {
        printf("{\"version\": ");
        cli_json_string(stdout, todre_version_string());
        printf(", \"version_number\": %u, \"backends\": {", todre_version_number());
        for (int i = 0; i < 2; i++) {
            printf("%s\"%s\": {\"available\": %s", i ? ", " : "", b[i].name,
                   b[i].available ? "true" : "false");
            if (!b[i].available) {
                printf(", \"reason\": ");
                cli_json_string(stdout, b[i].reason);
            }
            printf("}");
        }
        printf("}}\n");
    } else {
        printf("libtodre %s (todre tool built against %s)\n", todre_version_string(),
               TODRE_VERSION_STRING);
        for (int i = 0; i < 2; i++) {
            if (b[i].available) printf("backend %s: available\n", b[i].name);
            else printf("backend %s: unavailable (%s)\n", b[i].name, b[i].reason);
        }
    }
    return cli_finish_output(CMD);
}
