/* toolgate: the command line. Global options may stand anywhere on the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "mcp/server.h"
#include "util/json.h"

static const cli_command commands[] = {
    {"init", cmd_init, "create the database (--demo: a demo workspace, owner and agent)"},
    {"migrate", cmd_migrate, "apply pending database migrations"},
    {"tools", cmd_tools, "list the catalog or what an agent may use; write docs/TOOLS.md"},
    {"call", cmd_call, "call a tool through the gate, as an agent or a user"},
    {"mcp", cmd_mcp, "serve MCP over stdio as one agent or token holder"},
    {"serve", cmd_serve, "serve MCP over Streamable HTTP"},
    {"agents", cmd_agents, "create, list, grant, revoke, start, pause and archive agents"},
    {"token", cmd_token, "create, list and revoke API tokens"},
    {"runs", cmd_runs, "start, end, list and show agent runs; list a user's calls"},
    {"policy", cmd_policy, "set and list the workspace tool policy"},
    {"approvals", cmd_approvals, "list, show, approve and deny calls held for approval"},
    {"workspace", cmd_workspace, "workspace settings (naming profile)"},
    {"schema", cmd_schema, "validate instances; run the JSON Schema test suite"},
    {"missions", cmd_missions, "create and list missions"},
    {"ideas", cmd_ideas, "create and list ideas of a mission"},
    {"works", cmd_works, "create and list works of a mission"},
    {"tasks", cmd_tasks, "list, show, assign and approve tasks"},
    {"kb", cmd_kb, "put and list knowledge-base documents"},
    {"skills", cmd_skills, "add and list skills and their bindings"},
    {"activity", cmd_activity, "show the workspace's recent activity"},
    {"repos", cmd_repos, "list the git repositories and where to clone them"},
    {"prs", cmd_prs, "list, show, merge and close pull requests"},
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: toolgate [--data DIR] [--tenant SLUG] COMMAND [ARGS]\n"
          "       toolgate --version\n\n"
          "A permission-gated tool runtime for AI agents.\n\n"
          "global options:\n"
          "  --data DIR      where the database lives (env TOOLGATE_DATA, default ./data)\n"
          "  --tenant SLUG   the workspace (default: the only one)\n\n"
          "Operator commands (agents, token, runs, policy, approvals) act as the workspace owner, through\n"
          "the same gate as every tool call.\n\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n'toolgate COMMAND --help' tells more.\n");
}

/* Takes the global options out of argv wherever they stand. */
static int take_globals(cli *c, int *argc, char **argv) {
  int out = 1;
  bool given[2] = {false, false}; /* --data, --tenant */
  for (int i = 1; i < *argc; i++) {
    int which = strcmp(argv[i], "--data") == 0 ? 0 : strcmp(argv[i], "--tenant") == 0 ? 1 : -1;
    if (which < 0) {
      argv[out++] = argv[i];
      continue;
    }
    if (i + 1 >= *argc || !*argv[i + 1]) return cli_usage(NULL, "%s needs a value", argv[i]);
    if (given[which]) return cli_usage(NULL, "%s is given twice", argv[i]);
    given[which] = true;
    *(which == 0 ? &c->data_dir : &c->tenant) = argv[++i];
  }
  *argc = out;
  argv[out] = NULL;
  return CLI_OK;
}

/* Refuses arg, which is not UTF-8 text, showing its bytes past printable ASCII as \xNN. */
static int refuse_foreign(const char *arg) {
  fputs("toolgate: argument '", stderr);
  for (const unsigned char *s = (const unsigned char *)arg; *s; s++)
    fprintf(stderr, *s >= 0x20 && *s < 0x7f ? "%c" : "\\x%02x", *s);
  fputs("' is not UTF-8 text\n", stderr);
  return CLI_USAGE;
}

int main(int argc, char **argv) {
  cli c = {.data_dir = getenv("TOOLGATE_DATA")};
  if (!c.data_dir || !*c.data_dir) c.data_dir = "data";
  if (take_globals(&c, &argc, argv) != CLI_OK) return CLI_USAGE;
  /* What a command is given goes into JSON, which holds UTF-8 text only: an argument of other
   * bytes is refused here, rather than dropped or failing without a word further in. (--data
   * names a folder, in any bytes.) */
  for (int i = 1; i < argc; i++)
    if (!tg_utf8_valid(argv[i], strlen(argv[i]))) return refuse_foreign(argv[i]);
  if (c.tenant && !tg_utf8_valid(c.tenant, strlen(c.tenant))) return refuse_foreign(c.tenant);
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return CLI_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("toolgate %s\n", TG_MCP_SERVER_VERSION); /* what MCP clients are told too */
    return CLI_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(argv[1], commands[i].name) != 0) continue;
    int status = commands[i].run(&c, argc - 1, argv + 1);
    cli_close(&c);
    return status;
  }
  fprintf(stderr, "toolgate: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
