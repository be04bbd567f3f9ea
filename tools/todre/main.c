/*
 * todre: the command-line face of libtodre. Reads .npy files, prints kept
 * token indices (stage 1) and relevance ratios with the drop decision
 * (stage 2). Every error exits with status 2 and one line on stderr.
 */
#include <string.h>

#include "cli.h"

static const char USAGE[] =
    "usage:\n"
    "  todre select --embeddings E.npy [--cls A.npy] (--keep K | --ratio R)\n"
    "               [--objective max-sum|max-min|cls-topk]\n"
    "               [--pivot cls|center|farthest|random|isolated|auto] [--pivot-range LO:HI]\n"
    "               [--seed S] [--order selection|position] [--backend auto|cpu|cuda] [--json]\n"
    "  todre relevance --attn A.npy --types T.npy [--tau 0.1] [--backend B] [--json]\n"
    "  todre relevance --q Q.npy --k K.npy --types T.npy [--scale S] [--tau 0.1]\n"
    "                  [--backend B] [--json]\n"
    "  todre info [--json]\n"
    "  todre --version | --help\n"
    "\n"
    "select     keep K (or round(R*n)) of the n rows of E ([n, d] float32/float16) by greedy\n"
    "           diversification; prints the kept indices (ascending positions by default).\n"
    "relevance  text<->vision attention ratios of one layer from probabilities A ([H, Q, K]\n"
    "           or [Q, K]) or from queries/keys (causal softmax); T holds K token types\n"
    "           (0 system, 1 visual, 2 text); prints alpha_t2v alpha_v2t drop(0|1).\n"
    "info       library version, registered backends and their devices.\n"
    "--backend  auto (default: a GPU backend that can run here, else cpu), cpu, cuda, or any\n"
    "           backend 'todre info' lists; device 0.\n"
    "\n"
    "Errors: exit status 2 and one line on stderr. See docs/cli.md.\n";

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return cli_fail(NULL, "no command given (try todre --help)");
    const char *cmd = argv[1];
    if (wants_help(argc, argv) || !strcmp(cmd, "help")) {
        fputs(USAGE, stdout);
        return cli_finish_output(NULL);
    }
    if (!strcmp(cmd, "--version")) {
        if (argc > 2) return cli_fail(NULL, "--version takes no arguments");
        printf("todre %s\n", todre_version_string());
        return cli_finish_output(NULL);
    }
    if (!strcmp(cmd, "select")) return cli_select_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "relevance")) return cli_relevance_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "info")) return cli_info_main(argc - 2, argv + 2);
    return cli_fail(NULL, "unknown command '%s' (try todre --help)", cmd);
}
