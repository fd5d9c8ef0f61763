/* toolgate call: one tool call through tg_call, as an agent, a user or a token's holder. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/token_use.h"
#include "util/cleanup.h"
#include "util/json.h"
#include "util/status.h"

#define ARGS_MAX (1024 * 1024)

static const char usage[] =
    "usage: toolgate call TOOL (--agent SLUG | --user NAME | --token TOKEN) [--args JSON]\n"
    "                     [--surface agent|mcp|api] [--run RUN_ID] [--dry-run]\n\n"
    "Calls TOOL (canonical, model-facing or alias name) through the gate. Prints the result\n"
    "JSON and exits 0; prints the error envelope JSON and exits 1 when the call is refused or\n"
    "fails; exits 2 on a usage error. Without --agent, --user or --token, the token is\n"
    "taken from TOOLGATE_TOKEN, which keeps it out of ps.\n"
    "  --args JSON   the arguments object (default {})\n"
    "  --surface S   the surface the call comes from (default: agent for agents, api for users)\n"
    "  --run ID      attach the call to a running run of the agent (default: a run of its own)\n"
    "  --dry-run     run every gate but the handler; print why the call would pass or not\n";

/* A dry run writes nothing, not even its token's use. */
static int resolve_caller(cli *c, const char *agent, const char *user, bool dry_run,
                          char id[TG_UUID_LEN + 1]) {
  if (c->token) {
    int r = cli_token_principal(c, id);
    if (r == CLI_OK && !dry_run && tg_token_use_write(c->db, c->token) < 0)
      fprintf(stderr, "toolgate: warning: could not record the token's use: %s\n",
              tg_db_errmsg(c->db));
    return r;
  }
  int r = agent ? tg_principal_lookup(c->db, c->tenant_id, TG_PRINCIPAL_AGENT, agent, id)
                : tg_principal_lookup(c->db, c->tenant_id, TG_PRINCIPAL_USER, user, id);
  if (r == TG_OK) return CLI_OK;
  if (agent) fprintf(stderr, "toolgate: no agent '%s' in this workspace\n", agent);
  else fprintf(stderr, "toolgate: no user '%s' in this workspace\n", user);
  return CLI_FAILED;
}

int cmd_call(cli *c, int argc, char **argv) {
  if (cli_wants_help(argc, argv, usage)) return CLI_OK;
  static const struct option options[] = {{"agent", required_argument, NULL, 'a'},
                                          {"user", required_argument, NULL, 'u'},
                                          {"token", required_argument, NULL, 't'},
                                          {"args", required_argument, NULL, 'g'},
                                          {"surface", required_argument, NULL, 's'},
                                          {"run", required_argument, NULL, 'r'},
                                          {"dry-run", no_argument, NULL, 'd'},
                                          {0}};
  const char *agent = NULL, *user = NULL, *args_text = "{}", *surface = NULL;
  tg_call_request req = {0};
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "call", &seen)) != -1) {
    switch (opt) {
    case 'a': agent = optarg; break;
    case 'u': user = optarg; break;
    case 't': c->token = optarg; break;
    case 'g': args_text = optarg; break;
    case 's': surface = optarg; break;
    case 'r': req.run_id = optarg; break;
    case 'd': req.dry_run = true; break;
    default: return cli_usage(usage, "call: bad option");
    }
  }
  if (optind + 1 != argc) return cli_usage(usage, "call: name exactly one tool");
  if (!agent && !user && !c->token) cli_token_from_env(c);
  if (!!agent + !!user + !!c->token != 1)
    return cli_usage(usage,
                     "call: give exactly one of --agent, --user, --token (or TOOLGATE_TOKEN)");
  req.tool = argv[optind];
  if (surface && !(req.surface = tg_surface_parse(surface)))
    return cli_usage(usage, "call: unknown surface '%s'", surface);
  _cleanup_free_ char *why = NULL;
  _cleanup_json_ json_t *args = tg_json_parse(args_text, ARGS_MAX, &why);
  if (!args) return cli_usage(usage, "call: --args: %s", why ? why : "out of memory");
  req.args = args;

  if (cli_open(c, false) != CLI_OK) return CLI_FAILED;
  char principal[TG_UUID_LEN + 1];
  if (resolve_caller(c, agent, user, req.dry_run, principal) != CLI_OK) return CLI_FAILED;
  req.principal_id = principal;
  if (!req.surface) {
    /* A token's holder may be an agent: its surface is an agent's, not the operators'. */
    tg_principal *p = NULL;
    int r = tg_principal_load(c->db, principal, &p);
    if (r < 0) {
      fprintf(stderr, "toolgate: %s\n",
              r == TG_E_NOTFOUND ? "the caller is gone" : tg_db_errmsg(c->db));
      return CLI_FAILED;
    }
    req.surface = p->kind == TG_PRINCIPAL_AGENT ? TG_SURFACE_AGENT : TG_SURFACE_API;
    tg_principal_free(p);
  }

  tg_call_result res;
  int r = tg_call(&c->env, &req, &res);
  cli_print_json(res.value);
  tg_call_result_done(&res);
  return r == TG_OK ? CLI_OK : CLI_FAILED;
}
