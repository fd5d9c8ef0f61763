/* Placeholder until the catalog issue lands. */
#include "cli/cli.h"
int cmd_missions(cli *c, int argc, char **argv) { return cli_usage(NULL, "missions: not built yet"); }
int cmd_ideas(cli *c, int argc, char **argv) { return cli_usage(NULL, "ideas: not built yet"); }
int cmd_works(cli *c, int argc, char **argv) { return cli_usage(NULL, "works: not built yet"); }
int cmd_tasks(cli *c, int argc, char **argv) { return cli_usage(NULL, "tasks: not built yet"); }
