/* Placeholder until the catalog issue lands. */
#include "cli/cli.h"
int cmd_kb(cli *c, int argc, char **argv) { return cli_usage(NULL, "kb: not built yet"); }
int cmd_skills(cli *c, int argc, char **argv) { return cli_usage(NULL, "skills: not built yet"); }
int cmd_activity(cli *c, int argc, char **argv) { return cli_usage(NULL, "activity: not built yet"); }
