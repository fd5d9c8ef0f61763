/* Shared by the subcommands of the toolgate CLI. */
#pragma once
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>

#include "core/call.h"

/* Exit statuses every subcommand uses. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

typedef struct cli {
  const char *data_dir; /* --data, $TOOLGATE_DATA, ./data */
  const char *tenant;   /* --tenant: the workspace slug; NULL: the only one */
  /* A command's --token: the token names the workspace, so none needs naming, and one named
   * must be the token's (cli_token_principal). */
  const char *token;
  bool token_from_env; /* the token came from TOOLGATE_TOKEN (cli_token_from_env) */
  bool any_tenant; /* serve with authentication: each token acts in its own workspace */
  tg_db *db;
  tg_registry *registry;
  tg_env env;
  char tenant_id[TG_UUID_LEN + 1];
} cli;

typedef struct cli_command {
  const char *name;
  int (*run)(cli *c, int argc, char **argv); /* argv[0] is the command name */
  const char *summary;
} cli_command;

/* Opens the database (it must exist unless create), migrates it, builds the registry and
 * finds the workspace (unless c->token names it). Prints why on failure. */
int cli_open(cli *c, bool create);
/* For a command given no caller: the token in TOOLGATE_TOKEN as its --token, if set and not
 * empty. It keeps the token off the command line, which ps shows to every local user. */
void cli_token_from_env(cli *c);
/* The principal c->token names, in the workspace --tenant names if any. Prints why not. */
int cli_token_principal(cli *c, char id[TG_UUID_LEN + 1]);
void cli_close(cli *c);
/* Builds only the registry (commands that need no database). */
int cli_open_registry(cli *c);

/* Prints a usage error and returns CLI_USAGE. */
int cli_usage(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Under a listing's rows: says there are more when the result is truncated. */
void cli_more_note(json_t *result);
/* --OPTION VALUE: an integer into args[key] (the tool's schema checks its range); false,
 * with the usage error printed, when VALUE is not one. */
bool cli_integer_option(const char *usage, const char *command, const char *option,
                        const char *key, const char *value, json_t *args);

/* getopt_long over long options only, refusing one with a value given twice (the first would
 * be dropped without a word) unless its val is in repeatable (NULL: none). Returns what
 * getopt_long returns, or '?' after saying which option of command came twice. *seen, zeroed
 * before the first call, holds the options met, by their index in options (fewer than 64). */
int cli_getopt(int argc, char **argv, const struct option *options, const char *repeatable,
               const char *command, unsigned long long *seen);

/* One long option per tool argument: --option VALUE into args[key], an integer when integer. */
typedef struct cli_option_key {
  const char *option; /* "cap-cents" */
  const char *key;    /* "capCents" */
  bool integer;
} cli_option_key;
/* Parses the options of command (its argv) into args by keys (at most 14). A positional goes
 * to *positional (at most one, when positional is not NULL); --json sets *json (taken only
 * when json is not NULL). Returns CLI_OK or CLI_USAGE with the usage error printed. */
int cli_parse_options(int argc, char **argv, const char *usage, const char *command,
                      const cli_option_key *keys, size_t n_keys, json_t *args,
                      const char **positional, bool *json);
/* Whether argv holds --help or -h; prints usage to stdout when it does. */
bool cli_wants_help(int argc, char **argv, const char *usage);


/* Runs tool through tg_call as the operator on the api surface. On success returns CLI_OK
 * with the result in *ret; on failure prints the envelope on stdout, returns CLI_FAILED. */
int cli_operator_call(cli *c, const char *tool, json_t *args, json_t **ret);

/* Opens the workspace, calls tool as the owner with args (stolen), prints the result as
 * indented JSON, or with show when json is false and show is given. */
int cli_operate(cli *c, const char *tool, json_t *args, bool json, void (*show)(json_t *));
/* A listing command, [--limit N] [--json]: the tool's result, shown or as JSON. */
int cli_list(cli *c, int argc, char **argv, const char *usage, const char *command,
             const char *tool, void (*show)(json_t *));

/* For a subcommand (of command) whose only option is --json: sets *json, or prints a usage
 * error and returns CLI_USAGE on anything else. */
int cli_json_only(int argc, char **argv, const char *usage, const char *command, bool *json);

/* Prints value as indented JSON on stdout. */
void cli_print_json(const json_t *value);

/* Reads a whole file (bounded) into a malloc'd string; prints why on failure. */
char *cli_read_file(const char *path, size_t max_bytes);

int cmd_init(cli *c, int argc, char **argv);
int cmd_migrate(cli *c, int argc, char **argv);
int cmd_tools(cli *c, int argc, char **argv);
int cmd_call(cli *c, int argc, char **argv);
int cmd_agents(cli *c, int argc, char **argv);
int cmd_token(cli *c, int argc, char **argv);
int cmd_runs(cli *c, int argc, char **argv);
int cmd_policy(cli *c, int argc, char **argv);
int cmd_approvals(cli *c, int argc, char **argv);
int cmd_workspace(cli *c, int argc, char **argv);
int cmd_schema(cli *c, int argc, char **argv);
int cmd_mcp(cli *c, int argc, char **argv); /* cmd_mcp.c */
int cmd_serve(cli *c, int argc, char **argv);
int cmd_missions(cli *c, int argc, char **argv); /* cmd_work.c */
int cmd_ideas(cli *c, int argc, char **argv);
int cmd_works(cli *c, int argc, char **argv);
int cmd_tasks(cli *c, int argc, char **argv);
int cmd_kb(cli *c, int argc, char **argv); /* cmd_knowledge.c */
int cmd_skills(cli *c, int argc, char **argv);
int cmd_activity(cli *c, int argc, char **argv);
int cmd_repos(cli *c, int argc, char **argv); /* cmd_repo.c */
int cmd_prs(cli *c, int argc, char **argv);

/* Runs the subcommand argv[1] of a command among subs; handles --help and usage errors. */
int cli_dispatch(cli *c, int argc, char **argv, const cli_command *subs, size_t n_subs,
                 const char *usage);
