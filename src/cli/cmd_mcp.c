/* Placeholder until the MCP issue lands. */
#include "cli/cli.h"
int cmd_mcp(cli *c, int argc, char **argv) { return cli_usage(NULL, "mcp: not built yet"); }
int cmd_serve(cli *c, int argc, char **argv) { return cli_usage(NULL, "serve: not built yet"); }
