/* Operator commands: agents, token, runs, policy. Each is a tool call of the admin provider
 * made as the workspace owner, so people pass the same gate and leave the same audit trail. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/cleanup.h"
#include "util/json.h"

static const char agents_usage[] =
    "usage: toolgate agents create --slug S [--name N] [--scope tenant|mission:S|idea:S|work:S]\n"
    "                              [--status draft|active] [--grant P]...\n"
    "       toolgate agents list [--limit N] [--json]\n"
    "       toolgate agents grant SLUG PERMISSION\n"
    "       toolgate agents revoke SLUG PERMISSION\n"
    "       toolgate agents start|pause|archive|unarchive SLUG\n\n"
    "A permission is one a tool declares (tasks.assign) or a seed-000 flag (canAssignTasks).\n";

static int agents_create(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"slug", required_argument, NULL, 's'},
                                          {"name", required_argument, NULL, 'n'},
                                          {"scope", required_argument, NULL, 'c'},
                                          {"status", required_argument, NULL, 't'},
                                          {"grant", required_argument, NULL, 'g'},
                                          {0}};
  json_t *args = json_object(), *grants = json_array();
  json_object_set_new(args, "grants", grants);
  static const char *const keys[] = {['s'] = "slug", ['n'] = "name", ['c'] = "scope", ['t'] = "status"};
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, "g", "agents create", &seen)) != -1) {
    if (opt == 'g') {
      json_array_append_new(grants, json_string(optarg));
    } else if (opt == 's' || opt == 'n' || opt == 'c' || opt == 't') {
      json_object_set_new(args, keys[opt], json_string(optarg));
    } else {
      json_decref(args);
      return cli_usage(agents_usage, "agents create: bad option");
    }
  }
  if (optind < argc || !json_object_get(args, "slug")) {
    json_decref(args);
    return cli_usage(agents_usage, "agents create: --slug is required, nothing else positional");
  }
  return cli_operate(c, "admin.agent.create", args, true, NULL);
}

static void show_agents(json_t *result) {
  printf("%-24s %-8s %-22s %s\n", "AGENT", "STATUS", "SCOPE", "GRANTS");
  size_t i, k;
  json_t *a, *g;
  json_array_foreach(json_object_get(result, "agents"), i, a) {
    printf("%-24s %-8s %-22s ", json_string_value(json_object_get(a, "slug")),
           json_string_value(json_object_get(a, "status")),
           json_string_value(json_object_get(a, "scope")));
    json_array_foreach(json_object_get(a, "grants"), k, g)
      printf("%s%s", k ? "," : "", json_string_value(g));
    putchar('\n');
  }
  cli_more_note(result);
}

static int agents_list(cli *c, int argc, char **argv) {
  return cli_list(c, argc, argv, agents_usage, "agents list", "admin.agent.list", show_agents);
}

static int agents_grant_change(cli *c, int argc, char **argv, const char *tool) {
  if (argc != 3) return cli_usage(agents_usage, "agents %s: give SLUG and PERMISSION", argv[0]);
  return cli_operate(c, tool, json_pack("{s:s,s:s}", "agentSlug", argv[1], "permission", argv[2]),
                 true, NULL);
}

static int agents_grant(cli *c, int argc, char **argv) {
  return agents_grant_change(c, argc, argv, "admin.grant.add");
}

static int agents_revoke(cli *c, int argc, char **argv) {
  return agents_grant_change(c, argc, argv, "admin.grant.revoke");
}

/* Lifecycle: start (draft or paused → active), pause, archive, unarchive (→ paused). */
static int agents_lifecycle(cli *c, int argc, char **argv) {
  if (argc != 2) return cli_usage(agents_usage, "agents %s: give one SLUG", argv[0]);
  char tool[40];
  snprintf(tool, sizeof tool, "admin.agent.%s", argv[0]);
  return cli_operate(c, tool, json_pack("{s:s}", "agentSlug", argv[1]), true, NULL);
}

int cmd_agents(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"create", agents_create, NULL},
                                     {"list", agents_list, NULL},
                                     {"grant", agents_grant, NULL},
                                     {"revoke", agents_revoke, NULL},
                                     {"start", agents_lifecycle, NULL},
                                     {"pause", agents_lifecycle, NULL},
                                     {"archive", agents_lifecycle, NULL},
                                     {"unarchive", agents_lifecycle, NULL}};
  return cli_dispatch(c, argc, argv, subs, sizeof subs / sizeof subs[0], agents_usage);
}

static const char token_usage[] =
    "usage: toolgate token create (--user NAME | --agent SLUG)\n"
    "       toolgate token list [--user NAME | --agent SLUG] [--all] [--limit N] [--json]\n"
    "       toolgate token revoke TOKEN_ID\n\n"
    "create makes an API token for a user or an agent and prints it once; only its hash is\n"
    "kept. list shows live tokens (with --all, revoked ones too) by id and first characters.\n"
    "revoke refuses every request bearing the token from then on, and ends within seconds\n"
    "the sessions, streams and stdio servers it opened.\n";

/* A token command's options: --user NAME or --agent SLUG into args (with required, exactly
 * one of them, as create needs; else at most one), and list's --all, --limit and --json. */
static int token_holder_options(int argc, char **argv, bool required, json_t *args, bool *all,
                                bool *json) {
  static const struct option options[] = {
      {"user", required_argument, NULL, 'u'},  {"agent", required_argument, NULL, 'a'},
      {"all", no_argument, NULL, 'l'},         {"json", no_argument, NULL, 'j'},
      {"limit", required_argument, NULL, 'n'}, {0}};
  int opt, holders = 0;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "token", &seen)) != -1) {
    if ((opt == 'l' || opt == 'j') && !required) *(opt == 'l' ? all : json) = true;
    else if (opt == 'n' && !required) {
      if (!cli_integer_option(token_usage, "token list", "limit", "limit", optarg, args))
        return CLI_USAGE;
    } else if (opt == 'u' || opt == 'a') {
      json_object_set_new(args, opt == 'u' ? "username" : "agentSlug", json_string(optarg));
      holders++;
    } else
      return cli_usage(token_usage, "token %s: bad option", argv[0]);
  }
  if (optind < argc || holders > 1 || (required && holders != 1))
    return cli_usage(token_usage, "token %s: give %s one of --user, --agent", argv[0],
                     required ? "exactly" : "at most");
  return CLI_OK;
}

static int token_create(cli *c, int argc, char **argv) {
  json_t *args = json_object();
  if (token_holder_options(argc, argv, true, args, NULL, NULL) != CLI_OK) {
    json_decref(args);
    return CLI_USAGE;
  }
  return cli_operate(c, "admin.token.create", args, true, NULL);
}

static void show_tokens(json_t *result) {
  printf("%-36s %-12s %-24s %-24s %-24s %s\n", "TOKEN ID", "STARTS", "HOLDER", "CREATED",
         "LAST USED", "REVOKED");
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(result, "tokens"), i, t) {
    const char *revoked = json_string_value(json_object_get(t, "revokedAt"));
    const char *used = json_string_value(json_object_get(t, "lastUsedAt"));
    printf("%-36s %-12s %-24s %-24s %-24s %s\n", json_string_value(json_object_get(t, "tokenId")),
           json_string_value(json_object_get(t, "prefix")),
           json_string_value(json_object_get(t, "holder")),
           json_string_value(json_object_get(t, "createdAt")), used ? used : "-",
           revoked ? revoked : "-");
  }
  cli_more_note(result);
}

static int token_list(cli *c, int argc, char **argv) {
  json_t *args = json_object();
  bool all = false, json = false;
  if (token_holder_options(argc, argv, false, args, &all, &json) != CLI_OK) {
    json_decref(args);
    return CLI_USAGE;
  }
  json_object_set_new(args, "includeRevoked", json_boolean(all));
  return cli_operate(c, "admin.token.list", args, json, show_tokens);
}

static int token_revoke(cli *c, int argc, char **argv) {
  if (argc != 2) return cli_usage(token_usage, "token revoke: give one TOKEN_ID (token list)");
  return cli_operate(c, "admin.token.revoke", json_pack("{s:s}", "tokenId", argv[1]), true, NULL);
}

int cmd_token(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"create", token_create, NULL},
                                     {"list", token_list, NULL},
                                     {"revoke", token_revoke, NULL}};
  return cli_dispatch(c, argc, argv, subs, sizeof subs / sizeof subs[0], token_usage);
}

static const char runs_usage[] =
    "usage: toolgate runs start --agent SLUG\n"
    "       toolgate runs end RUN_ID [--status completed|failed|cancelled]\n"
    "       toolgate runs list [--agent SLUG] [--limit N] [--json]\n"
    "       toolgate runs show RUN_ID [--json]\n"
    "       toolgate runs calls --user NAME [--limit N] [--json]\n\n"
    "A run groups an agent's calls; 'call --run RUN_ID' attaches a call to a running run.\n"
    "A user's calls belong to no run: 'runs calls' lists them, newest first.\n";

static int runs_start(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"agent", required_argument, NULL, 'a'}, {0}};
  const char *agent = NULL;
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "runs start", &seen)) != -1) {
    if (opt == 'a') agent = optarg;
    else return cli_usage(runs_usage, "runs start: bad option");
  }
  if (optind < argc || !agent) return cli_usage(runs_usage, "runs start: --agent is required");
  if (cli_open(c, false) != CLI_OK) return CLI_FAILED;
  _cleanup_json_ json_t *args = json_pack("{s:s}", "agentSlug", agent), *result = NULL;
  int r = cli_operator_call(c, "admin.run.start", args, &result);
  if (r == CLI_OK) puts(json_string_value(json_object_get(result, "runId")));
  return r;
}

static int runs_end(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"status", required_argument, NULL, 's'}, {0}};
  json_t *args = json_object();
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "runs end", &seen)) != -1) {
    if (opt == 's') {
      json_object_set_new(args, "status", json_string(optarg));
    } else {
      json_decref(args);
      return cli_usage(runs_usage, "runs end: bad option");
    }
  }
  if (optind + 1 != argc) {
    json_decref(args);
    return cli_usage(runs_usage, "runs end: give one RUN_ID");
  }
  json_object_set_new(args, "runId", json_string(argv[optind]));
  return cli_operate(c, "admin.run.end", args, true, NULL);
}

static void show_runs(json_t *result) {
  printf("%-36s %-20s %-10s %-5s %s\n", "RUN", "AGENT", "STATUS", "CALLS", "STARTED");
  size_t i;
  json_t *r;
  json_array_foreach(json_object_get(result, "runs"), i, r) {
    printf("%-36s %-20s %-10s %-5lld %s\n", json_string_value(json_object_get(r, "id")),
           json_string_value(json_object_get(r, "agent")),
           json_string_value(json_object_get(r, "status")),
           (long long)json_integer_value(json_object_get(r, "calls")),
           json_string_value(json_object_get(r, "startedAt")));
  }
  cli_more_note(result);
}

static int runs_list(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"agent", "agentSlug", false}, {"limit", "limit", true}};
  _cleanup_json_ json_t *args = json_object();
  bool json = false;
  int r = cli_parse_options(argc, argv, runs_usage, "runs list", keys, 2, args, NULL, &json);
  if (r != CLI_OK) return r;
  return cli_operate(c, "admin.run.list", json_incref(args), json, show_runs);
}

/* One line per telemetry row: when, level, step, duration and message. */
static void show_logs(json_t *logs) {
  size_t i;
  json_t *log;
  json_array_foreach(logs, i, log) {
    json_t *meta = json_object_get(log, "metadata");
    printf("  %s %-5s %-28s %8.3f ms  %s\n", json_string_value(json_object_get(log, "createdAt")),
           json_string_value(json_object_get(log, "level")),
           json_string_value(json_object_get(log, "step")),
           json_number_value(json_object_get(meta, "durationMs")),
           json_string_value(json_object_get(log, "message")));
  }
}

static void show_run(json_t *result) {
  json_t *run = json_object_get(result, "run");
  printf("run %s of %s: %s (%s)\n", json_string_value(json_object_get(run, "id")),
         json_string_value(json_object_get(run, "agent")),
         json_string_value(json_object_get(run, "status")),
         json_string_value(json_object_get(run, "startedAt")));
  show_logs(json_object_get(result, "logs"));
  if (json_is_true(json_object_get(result, "truncated")))
    puts("  (more rows than shown: these are the run's first 1000)");
}

static void show_calls(json_t *result) {
  json_t *calls = json_object_get(result, "calls");
  if (!json_array_size(calls)) puts("(no calls)");
  show_logs(calls);
  cli_more_note(result);
}

static int runs_calls(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"user", "username", false}, {"limit", "limit", true}};
  _cleanup_json_ json_t *args = json_object();
  bool json = false;
  int r = cli_parse_options(argc, argv, runs_usage, "runs calls", keys, 2, args, NULL, &json);
  if (r != CLI_OK) return r;
  if (!json_object_get(args, "username"))
    return cli_usage(runs_usage, "runs calls: --user is required");
  return cli_operate(c, "admin.user.calls", json_incref(args), json, show_calls);
}

static int runs_show(cli *c, int argc, char **argv) {
  bool json = false;
  int positional = 0;
  const char *id = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      id = argv[i];
      positional++;
    }
  }
  if (positional != 1) return cli_usage(runs_usage, "runs show: give one RUN_ID");
  return cli_operate(c, "admin.run.show", json_pack("{s:s}", "runId", id), json, show_run);
}

int cmd_runs(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"start", runs_start, NULL},
                                     {"end", runs_end, NULL},
                                     {"list", runs_list, NULL},
                                     {"show", runs_show, NULL},
                                     {"calls", runs_calls, NULL}};
  return cli_dispatch(c, argc, argv, subs, sizeof subs / sizeof subs[0], runs_usage);
}

static const char policy_usage[] =
    "usage: toolgate policy set TOOL enabled|disabled|approval|default\n"
    "       toolgate policy list [--json]\n\n"
    "Without a policy row, low and medium risk tools are enabled and high risk tools disabled.\n";

static int policy_set(cli *c, int argc, char **argv) {
  if (argc != 3) return cli_usage(policy_usage, "policy set: give TOOL and MODE");
  return cli_operate(c, "admin.policy.set", json_pack("{s:s,s:s}", "tool", argv[1], "mode", argv[2]),
                 true, NULL);
}

static void show_policy(json_t *result) {
  printf("%-28s %-7s %-9s %s\n", "TOOL", "RISK", "MODE", "SOURCE");
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(result, "tools"), i, t) {
    printf("%-28s %-7s %-9s %s\n", json_string_value(json_object_get(t, "tool")),
           json_string_value(json_object_get(t, "risk")),
           json_string_value(json_object_get(t, "mode")),
           json_string_value(json_object_get(t, "source")));
  }
}

static int policy_list(cli *c, int argc, char **argv) {
  bool json;
  if (cli_json_only(argc, argv, policy_usage, "policy", &json) != CLI_OK) return CLI_USAGE;
  return cli_operate(c, "admin.policy.list", json_object(), json, show_policy);
}

int cmd_policy(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"set", policy_set, NULL}, {"list", policy_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, policy_usage);
}

static const char approvals_usage[] =
    "usage: toolgate approvals list [--status pending|approved|denied|used|expired|all]\n"
    "                               [--limit N] [--json]\n"
    "       toolgate approvals show APPROVAL_ID [--json]\n"
    "       toolgate approvals approve APPROVAL_ID [--note TEXT] [--json]\n"
    "       toolgate approvals deny APPROVAL_ID [--note TEXT] [--json]\n\n"
    "A tool whose policy is 'approval' runs an agent's call, or a person's over MCP, only on an\n"
    "approval of the very call (its caller, tool and arguments). A held call is refused with\n"
    "details.approvalId; once a person approves it here (never over MCP), the\n"
    "caller's next call with the same arguments within the hour runs, once. A denied call is\n"
    "refused for the hour. Requests wait 24 hours for a decision.\n";

/* Whether text holds a character that changes how what follows it is shown: the
 * bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which
 * reorder it, and the C1 controls (U+0080 to U+009F), which some terminals take for the start
 * of a control sequence. */
static bool misleads_display(const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return true;
    if (p[0] == 0xd8 && p[1] == 0x9c) return true;
    if (p[0] != 0xe2 || !p[1]) continue;
    if (p[1] == 0x80 && (p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xaa && p[2] <= 0xae)))
      return true;
    if (p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9) return true;
  }
  return false;
}

/* A request's arguments as an approver reads them: JSON, with every character past ASCII
 * escaped (*escaped) when some would change what is shown, so that the text read is the text
 * that runs. */
static char *approver_text(json_t *args, size_t flags, bool *escaped) {
  char *text = json_dumps(args, flags);
  *escaped = text && misleads_display(text);
  if (!*escaped) return text;
  free(text);
  return json_dumps(args, flags | JSON_ENSURE_ASCII);
}

#define LISTED_ARGS_MAX 200 /* bytes of a request's arguments in the list */

static void show_approvals(json_t *result) {
  json_t *rows = json_object_get(result, "approvals");
  if (!json_array_size(rows)) puts("(no approval requests)");
  size_t i;
  json_t *a;
  json_array_foreach(rows, i, a) {
    bool escaped;
    _cleanup_free_ char *args = approver_text(json_object_get(a, "args"), JSON_COMPACT, &escaped);
    bool cut = args && strlen(args) > LISTED_ARGS_MAX;
    printf("%s %-8s %s %s by %s: %s %s%.*s%s\n", json_string_value(json_object_get(a, "id")),
           json_string_value(json_object_get(a, "status")),
           json_string_value(json_object_get(a, "createdAt")),
           json_string_value(json_object_get(a, "callerKind")),
           json_string_value(json_object_get(a, "caller")),
           json_string_value(json_object_get(a, "tool")), escaped ? "(escaped) " : "",
           TG_UTF8_CUT(args ? args : "", LISTED_ARGS_MAX),
           cut ? "... (cut: approvals show ID shows them whole)" : "");
  }
  cli_more_note(result);
}

static int approvals_list(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"status", "status", false}, {"limit", "limit", true}};
  _cleanup_json_ json_t *args = json_object();
  bool json = false;
  int r = cli_parse_options(argc, argv, approvals_usage, "approvals list", keys, 2, args, NULL,
                            &json);
  if (r != CLI_OK) return r;
  return cli_operate(c, "admin.approval.list", json_incref(args), json, show_approvals);
}

/* One request whole: what an approver decides on. */
static void show_approval(json_t *result) {
  json_t *a = json_array_get(json_object_get(result, "approvals"), 0);
  static const char *const fields[] = {"id",         "status",    "tool",      "caller",
                                       "callerKind", "createdAt", "expiresAt", "decidedBy",
                                       "decidedAt",  "note",      "usedAt",    "runId"};
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
    const char *value = json_string_value(json_object_get(a, fields[i]));
    if (value) printf("%-12s %s\n", fields[i], value);
  }
  bool escaped;
  _cleanup_free_ char *args = approver_text(json_object_get(a, "args"), JSON_INDENT(2), &escaped);
  printf("arguments%s:\n%s\n",
         escaped ? " (escaped: they hold characters that change what is shown)" : "",
         args ? args : "");
}

static int approvals_show(cli *c, int argc, char **argv) {
  _cleanup_json_ json_t *args = json_object();
  const char *id = NULL;
  bool json = false;
  int r = cli_parse_options(argc, argv, approvals_usage, "approvals show", NULL, 0, args, &id,
                            &json);
  if (r != CLI_OK) return r;
  if (!id) return cli_usage(approvals_usage, "approvals show: give one APPROVAL_ID");
  json_object_set_new(args, "approvalId", json_string(id));
  return cli_operate(c, "admin.approval.list", json_incref(args), json, show_approval);
}

static void show_decision(json_t *result) {
  printf("%s %s: %s, until %s\n", json_string_value(json_object_get(result, "approvalId")),
         json_string_value(json_object_get(result, "tool")),
         json_string_value(json_object_get(result, "status")),
         json_string_value(json_object_get(result, "expiresAt")));
}

static int approvals_decide(cli *c, int argc, char **argv, const char *decision) {
  static const cli_option_key keys[] = {{"note", "note", false}};
  _cleanup_json_ json_t *args = json_pack("{s:s}", "decision", decision);
  const char *id = NULL;
  bool json = false;
  char command[32];
  snprintf(command, sizeof command, "approvals %s", argv[0]);
  int r = cli_parse_options(argc, argv, approvals_usage, command, keys, 1, args, &id, &json);
  if (r != CLI_OK) return r;
  if (!id) return cli_usage(approvals_usage, "%s: give one APPROVAL_ID", command);
  json_object_set_new(args, "approvalId", json_string(id));
  return cli_operate(c, "agent.approval.resolve", json_incref(args), json, show_decision);
}

static int approvals_approve(cli *c, int argc, char **argv) {
  return approvals_decide(c, argc, argv, "approve");
}

static int approvals_deny(cli *c, int argc, char **argv) {
  return approvals_decide(c, argc, argv, "deny");
}

int cmd_approvals(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"list", approvals_list, NULL},
                                     {"show", approvals_show, NULL},
                                     {"approve", approvals_approve, NULL},
                                     {"deny", approvals_deny, NULL}};
  return cli_dispatch(c, argc, argv, subs, 4, approvals_usage);
}

static const char workspace_usage[] =
    "usage: toolgate workspace set --naming canonical|catalog\n\n"
    "canonical: agents are offered model-facing names (work_task_create); catalog: exactly the\n"
    "seed-000 names (createTask), and tools without one are not offered.\n";

static int workspace_set(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"naming", required_argument, NULL, 'n'}, {0}};
  const char *naming = NULL;
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "workspace set", &seen)) != -1) {
    if (opt == 'n') naming = optarg;
    else return cli_usage(workspace_usage, "workspace set: bad option");
  }
  if (optind < argc || !naming) return cli_usage(workspace_usage, "workspace set: --naming is required");
  return cli_operate(c, "admin.workspace.set", json_pack("{s:s}", "namingProfile", naming), true, NULL);
}

int cmd_workspace(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"set", workspace_set, NULL}};
  return cli_dispatch(c, argc, argv, subs, 1, workspace_usage);
}
