/* toolgate mcp (stdio) and toolgate serve (Streamable HTTP): the MCP surfaces. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/run.h"
#include "http/server.h"
#include "mcp/stdio.h"
#include "tools/conformance.h"
#include "tools/providers.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/json.h"
#include "util/log.h"
#include "util/process_tag.h"
#include "util/status.h"
#include "util/stop_signals.h"

#define DEFAULT_LISTEN "127.0.0.1:7878"
#define RATE_LIMIT_USAGE                                                                           \
  "  --rate-limit CALLS/SECONDS\n"                                                                 \
  "                          each caller has a bucket of CALLS tool calls refilled in\n"           \
  "                          SECONDS (default " TG_RATE_LIMIT_DEFAULT "): a call counts\n"         \
  "                          whatever refuses it; one past the bucket is refused\n"                \
  "                          (rate_limited, details.retryAfterMs). 'off': no limit\n"

static const char mcp_usage[] =
    "usage: toolgate mcp (--agent SLUG | --token TOKEN) [--run RUN_ID]\n"
    "                    [--rate-limit CALLS/SECONDS|off] [--conformance-fixtures]\n\n"
    "Serves MCP 2026-07-28 and, to a client that opens with initialize, 2025-11-25 (or\n"
    "2025-06-18, 2025-03-26, 2024-11-05) over stdio: newline-delimited JSON-RPC on stdin\n"
    "and stdout, logs on stderr. Every tool call is made as the agent, or as the holder of\n"
    "the API token, through the same gate as every other surface. Without --agent or\n"
    "--token, the token is taken from TOOLGATE_TOKEN, which keeps it out of ps.\n"
    "  --run RUN_ID            attach every call to this running run of the agent ('runs\n"
    "                          start'; one not running stops the server). Without it, an\n"
    "                          agent's server is a run of its own (trigger mcp; opened\n"
    "                          at its first tool call once the agent is active), ended\n"
    "                          when the server stops. Either way per-run caps bind, and\n"
    "                          a call once the run ended is refused.\n"
    RATE_LIMIT_USAGE
    "  --conformance-fixtures  also serve the fixtures of the official conformance suite\n";

static const char serve_usage[] =
    "usage: toolgate serve [--listen HOST:PORT] [--no-auth [--agent SLUG]]\n"
    "                      [--rate-limit CALLS/SECONDS|off] [--conformance-fixtures]\n"
    "                      [--threads N]\n\n"
    "Serves MCP over Streamable HTTP on POST/GET/DELETE /mcp, and /healthz.\n"
    "Requests authenticate with 'Authorization: Bearer TOKEN' (toolgate token create), each\n"
    "acting in its token's workspace; with the global --tenant, only that workspace's tokens\n"
    "are taken. A request with 'Toolgate-Run: RUN_ID' attaches its calls to that running run\n"
    "of the agent, as 'mcp --run' does. Without it, an agent's 2025-11-25 session is a run\n"
    "of its own (trigger mcp; opened at its first tool call once the agent is active),\n"
    "ended with the session; a 2026-07-28 call is one, and may not call a tool capped per\n"
    "run (editAgentFile) unless it names a run.\n"
    "  --listen HOST:PORT      where to listen (default " DEFAULT_LISTEN ")\n"
    "  --no-auth               loopback only: every request acts as --agent SLUG, or as the\n"
    "                          workspace owner\n"
    RATE_LIMIT_USAGE
    "  --conformance-fixtures  also serve the fixtures of the official conformance suite\n"
    "  --threads N             worker threads for calls of interactive tools, which stream\n"
    "                          as they run (default: twice the number of CPUs); other\n"
    "                          requests run on their connection's thread (at most 256)\n";

/* The registry, with the conformance provider appended when asked for. */
static int open_registry(cli *c, bool fixtures) {
  if (!fixtures) return cli_open_registry(c);
  size_t n = tg_builtin_providers_count;
  _cleanup_free_ const tg_provider **list = calloc(n + 1, sizeof *list);
  if (!list) return CLI_FAILED;
  memcpy(list, tg_builtin_providers, n * sizeof *list);
  list[n] = &tg_provider_conformance;
  _cleanup_free_ char *why = NULL;
  if (tg_registry_new(list, n + 1, &c->registry, &why) < 0) {
    fprintf(stderr, "toolgate: the tool registry did not load: %s\n", why ? why : "out of memory");
    return CLI_FAILED;
  }
  c->env.registry = c->registry;
  return CLI_OK;
}

/* Names principal_id in who ("agent demo", "user owner") for the log, and warns when it is
 * an agent that is offered no tools: a client would only see an empty list. */
static void describe(cli *c, const char *principal_id, char *who, size_t size) {
  tg_principal *p = NULL;
  if (tg_principal_load(c->db, principal_id, &p) < 0) {
    snprintf(who, size, "principal %s", principal_id);
    return;
  }
  bool agent = p->kind == TG_PRINCIPAL_AGENT;
  snprintf(who, size, "%s %s", agent ? "agent" : "user", p->name);
  if (agent && strcmp(p->status, "active") != 0)
    tg_log(TG_LOG_WARN, "agent %s is %s: it is offered no tools until it is active "
           "(toolgate agents start|unarchive %s)", p->name, p->status, p->name);
  tg_principal_free(p);
}

/* The run of an agent's stdio server, and how it ends. */
typedef struct session_run {
  char id[TG_UUID_LEN + 1]; /* "" until the server opens it (tg_mcp_server.own_run) */
  char holder[TG_PROCESS_TAG_LEN]; /* this process ("" when /proc cannot tell) */
  const char *status;
} session_run;

static int end_orphans(void *arg, tg_db *db) { return tg_run_end_orphans(db, arg); }

/* The runs of servers cut off on this machine (SIGKILL, a crash, a reboot) would stay
 * running: each server, stdio or HTTP, ends those it finds as it starts. */
static void end_orphan_runs(cli *c) {
  int ended = 0;
  if (tg_db_batch(c->db, end_orphans, &ended) < 0)
    tg_log(TG_LOG_WARN, "runs: the runs of servers gone were not ended: %s", tg_db_errmsg(c->db));
  else if (ended)
    tg_log(TG_LOG_INFO, "runs: ended %d run%s of servers gone (killed or crashed) as failed",
           ended, ended == 1 ? "" : "s");
}

static int end_run(void *arg, tg_db *db) {
  session_run *run = arg;
  return tg_run_end(db, run->id, run->status);
}

/* The run given with --run: a running run of the agent, else every call of the server would
 * be refused. Asked of the call path's own run gate (a dry run, which writes nothing; the
 * gate comes first, so any tool asks it), which checks it again at each call. */
static int check_given_run(cli *c, const char *principal_id, const char *run) {
  tg_call_request req = {.principal_id = principal_id, .surface = TG_SURFACE_MCP,
                         .tool = "agent.tool.list", .run_id = run, .dry_run = true};
  tg_call_result res;
  tg_call(&c->env, &req, &res);
  json_t *first = json_array_get(res.gates, 0);
  bool refused = !first || (strcmp(tg_json_str(first, "gate"), "run") == 0 &&
                            !json_is_true(json_object_get(first, "ok")));
  if (refused)
    fprintf(stderr, "toolgate: --run: %s\n",
            first ? tg_json_str(first, "detail") : "the run could not be checked");
  tg_call_result_done(&res);
  return refused ? CLI_FAILED : CLI_OK;
}

/* Ends the server's run as its serving ended (served, tg_mcp_stdio_serve's outcome):
 * cancelled once its token was revoked, as an HTTP session's; failed on a fault of its own;
 * else completed (its client left, closing its input or output, or it was told to stop). */
static void end_session_run(cli *c, session_run *run, int served) {
  run->status = served == TG_E_NOTFOUND               ? "cancelled"
                : served < 0 && served != TG_E_IO ? "failed"
                                                  : "completed";
  int r = tg_db_batch(c->db, end_run, run);
  if (r == TG_E_NOTFOUND)
    tg_log(TG_LOG_INFO, "mcp: run %s had been ended already", run->id);
  else if (r < 0)
    tg_log(TG_LOG_WARN, "mcp: run %s was not ended: %s", run->id, tg_db_errmsg(c->db));
}

/* The limit --rate-limit names (text) in *limit: NULL for "off" (tg_rate_limit_tell says
 * either once the server serves). */
static int open_rate_limit(const char *text, const char *usage, const char *command,
                           tg_rate_limit **limit) {
  unsigned calls, seconds;
  *limit = NULL;
  if (tg_rate_limit_parse(text, &calls, &seconds) < 0)
    return cli_usage(usage, "%s: --rate-limit takes CALLS/SECONDS (1 to %u calls in 1 to %u s) "
                     "or off", command, TG_RATE_LIMIT_MAX_CALLS, TG_RATE_LIMIT_MAX_SECONDS);
  if (!calls) return CLI_OK;
  return (*limit = tg_rate_limit_new(calls, seconds)) ? CLI_OK : CLI_FAILED;
}

static void ignore_signal(int sig) { (void)sig; }

/* A client that closed the server's output or its log is an error to report (EPIPE), or a
 * log line dropped, not a silent death. A handler, not SIG_IGN: a tool's child process gets
 * the default again when it starts. Before anything is logged. */
static void quiet_sigpipe(void) {
  struct sigaction quiet = {.sa_handler = ignore_signal};
  sigaction(SIGPIPE, &quiet, NULL);
}

int cmd_mcp(cli *c, int argc, char **argv) {
  if (cli_wants_help(argc, argv, mcp_usage)) return CLI_OK;
  quiet_sigpipe();
  static const struct option options[] = {{"agent", required_argument, NULL, 'a'},
                                          {"token", required_argument, NULL, 't'},
                                          {"run", required_argument, NULL, 'r'},
                                          {"rate-limit", required_argument, NULL, 'R'},
                                          {"conformance-fixtures", no_argument, NULL, 'f'},
                                          {0}};
  const char *agent = NULL, *run = NULL, *rate = TG_RATE_LIMIT_DEFAULT;
  bool fixtures = false;
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "mcp", &seen)) != -1) {
    switch (opt) {
    case 'a': agent = optarg; break;
    case 't': c->token = optarg; break;
    case 'r': run = optarg; break;
    case 'R': rate = optarg; break;
    case 'f': fixtures = true; break;
    default: return cli_usage(mcp_usage, "mcp: bad option");
    }
  }
  if (optind != argc) return cli_usage(mcp_usage, "mcp: unexpected argument '%s'", argv[optind]);
  if (!agent && !c->token) cli_token_from_env(c);
  if (!!agent + !!c->token != 1)
    return cli_usage(mcp_usage, "mcp: give exactly one of --agent, --token (or TOOLGATE_TOKEN)");
  _cleanup_rate_limit_ tg_rate_limit *limit = NULL;
  int usable = open_rate_limit(rate, mcp_usage, "mcp", &limit);
  if (usable != CLI_OK) return usable;
  if (open_registry(c, fixtures) != CLI_OK || cli_open(c, false) != CLI_OK) return CLI_FAILED;
  char principal[TG_UUID_LEN + 1];
  if (c->token && cli_token_principal(c, principal) != CLI_OK) return CLI_FAILED;
  if (agent && tg_principal_lookup(c->db, c->tenant_id, TG_PRINCIPAL_AGENT, agent, principal) < 0) {
    fprintf(stderr, "toolgate: no agent '%s' in this workspace\n", agent);
    return CLI_FAILED;
  }
  end_orphan_runs(c);
  session_run session = {.id = ""};
  if (run && check_given_run(c, principal, run) != CLI_OK) return CLI_FAILED;
  /* Without --run, an agent's stdio server is one run (its client's session), which the
   * server opens at its first call and which ends with the server. One cut off (SIGKILL, a
   * crash) is ended by the next server on the machine, which its row's holder, this process,
   * lets tell it from a live one. The server writes it itself, not through the operator's
   * tools, which the workspace policy could hold. */
  if (!run) tg_process_tag_of_holder(session.holder, "mcp");
  /* The run is checked by each call's gate, as 'call --run' is: a run that ends while the
   * server serves refuses the calls after it. */
  tg_mcp_server srv = {.fixtures = fixtures, .name = "toolgate", .version = TG_MCP_SERVER_VERSION,
                       .run_id = run, .own_run = run ? NULL : session.id,
                       .run_holder = *session.holder ? session.holder : NULL};
  char who[96];
  describe(c, principal, who, sizeof who);
  const char *by = c->token_from_env ? " (by TOOLGATE_TOKEN)" : c->token ? " (by token)" : "";
  tg_rate_limit_tell(limit, "mcp");
  tg_log(TG_LOG_INFO, "mcp: serving stdio as %s%s%s%s%.64s", who, by,
         fixtures ? " with the conformance fixtures" : "", srv.run_id ? ", in run " : "",
         srv.run_id ? srv.run_id : "");
  /* SIGINT and SIGTERM (a client's way to end a server slow to exit), and SIGHUP (its
   * terminal closed), stop serving, so that what runs is cancelled and audited, and the run
   * ended, instead of cut off. Blocked before any thread starts, so that only the descriptor
   * hears them. */
  sigset_t stop;
  tg_stop_signals(&stop);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  int stop_fd = signalfd(-1, &stop, SFD_CLOEXEC);
  if (stop_fd < 0) {
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL); /* then they end the process, as before */
    tg_log(TG_LOG_WARN, "mcp: the stop signals (SIGINT, SIGTERM, SIGHUP) will end the server "
           "at once: %s", strerror(errno));
  }
  c->env.rate_limit = limit;
  int r = tg_mcp_stdio_serve(&srv, &c->env, principal, c->token, stdin, stdout, stop_fd);
  c->env.rate_limit = NULL; /* freed as this returns */
  if (stop_fd >= 0) close(stop_fd);
  if (*session.id) end_session_run(c, &session, r);
  if (r < 0)
    tg_log(TG_LOG_ERROR, "mcp: stopped: %s",
           r == TG_E_NOMEM      ? "out of memory"
           : r == TG_E_NOTFOUND ? "its token was revoked"
           : r == TG_E_IO       ? "output closed"
                                : "the database failed");
  return r < 0 ? CLI_FAILED : CLI_OK;
}

int cmd_serve(cli *c, int argc, char **argv) {
  if (cli_wants_help(argc, argv, serve_usage)) return CLI_OK;
  quiet_sigpipe();
  static const struct option options[] = {{"listen", required_argument, NULL, 'l'},
                                          {"no-auth", no_argument, NULL, 'n'},
                                          {"agent", required_argument, NULL, 'a'},
                                          {"conformance-fixtures", no_argument, NULL, 'f'},
                                          {"threads", required_argument, NULL, 'j'},
                                          {"rate-limit", required_argument, NULL, 'R'},
                                          {0}};
  /* Tool calls mostly queue for the one write lock: a few workers per CPU keep it busy. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  tg_http_config cfg = {.listen = DEFAULT_LISTEN,
                        .threads = cpus > 0 ? (cpus < 128 ? 2 * (unsigned)cpus : 256) : 8};
  const char *agent = NULL, *rate = TG_RATE_LIMIT_DEFAULT;
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "serve", &seen)) != -1) {
    switch (opt) {
    case 'l': cfg.listen = optarg; break;
    case 'R': rate = optarg; break;
    case 'n': cfg.no_auth = true; break;
    case 'a': agent = optarg; break;
    case 'f': cfg.server.fixtures = true; break;
    case 'j': {
      char *end = NULL;
      long n = strtol(optarg, &end, 10);
      if (*end || n < 1 || n > 256)
        return cli_usage(serve_usage, "serve: --threads takes 1 to 256");
      cfg.threads = (unsigned)n;
      break;
    }
    default: return cli_usage(serve_usage, "serve: bad option");
    }
  }
  if (optind != argc)
    return cli_usage(serve_usage, "serve: unexpected argument '%s'", argv[optind]);
  if (agent && !cfg.no_auth) return cli_usage(serve_usage, "serve: --agent goes with --no-auth");
  int listens = tg_http_check_listen(&cfg); /* it says why not */
  if (listens < 0) return listens == TG_E_INVAL ? CLI_USAGE : CLI_FAILED;
  _cleanup_rate_limit_ tg_rate_limit *limit = NULL;
  int usable = open_rate_limit(rate, serve_usage, "serve", &limit);
  if (usable != CLI_OK) return usable;
  cfg.rate_limit = limit;
  c->any_tenant = !cfg.no_auth;
  if (open_registry(c, cfg.server.fixtures) != CLI_OK || cli_open(c, false) != CLI_OK)
    return CLI_FAILED;
  /* With --tenant, only that workspace's tokens: a server named for one serves no other. */
  if (!cfg.no_auth && c->tenant) cfg.tenant_id = c->tenant_id;
  char principal[TG_UUID_LEN + 1], who[96];
  if (cfg.no_auth) {
    int r = agent ? tg_principal_lookup(c->db, c->tenant_id, TG_PRINCIPAL_AGENT, agent, principal)
                  : tg_principal_owner(c->db, c->tenant_id, principal);
    if (r < 0 && agent) {
      fprintf(stderr, "toolgate: no agent '%s' in this workspace\n", agent);
      return CLI_FAILED;
    }
    if (r < 0) {
      fprintf(stderr, "toolgate: the workspace has no owner to act as\n");
      return CLI_FAILED;
    }
    cfg.no_auth_principal = principal;
    describe(c, principal, who, sizeof who);
    cfg.no_auth_who = who;
  }
  cfg.server.name = "toolgate";
  cfg.server.version = TG_MCP_SERVER_VERSION;
  cfg.data_dir = c->data_dir;
  /* Links (a pull request's) name this server unless TOOLGATE_PUBLIC_URL names another. */
  cfg.public_url = getenv("TOOLGATE_PUBLIC_URL");
  cfg.registry = c->registry;
  end_orphan_runs(c);
  /* Every server thread opens its own connection: the start-up one would only sit idle. */
  tg_db_close(c->db);
  c->db = c->env.db = NULL;
  return tg_http_serve(&cfg) < 0 ? CLI_FAILED : CLI_OK;
}
