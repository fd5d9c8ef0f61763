/* What the gate costs: tg_call on a read tool and on agent.tool.list, next to the tool's
 * handler called directly, in one process on a real SQLite file. bench/run.sh runs it beside
 * the MCP TypeScript SDK doing the same call (bench/peer-node). */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/call.h"
#include "tools/providers.h"
#include "util/status.h"

#define DEFAULT_CALLS 20000L
#define DEFAULT_WARMUP 2000L
#define ECHO_TOOL "bench.echo.read"
#define ECHO_TEXT "hello from the benchmark" /* bench.mjs sends the same text */

static const char includes[] =
    "toolgate tg_call, in process: load the caller and its live grants from SQLite, resolve the "
    "tool, run the surface/status/permission/policy/budget gates and validate the arguments "
    "against the compiled JSON Schema, then in one SQLite write transaction (WAL, "
    "synchronous=NORMAL) run the handler, validate its result, and write the call's agent_runs "
    "row and its telemetry row. No transport, no JSON text: arguments arrive parsed, as they "
    "do from a surface.";

static int bench_echo(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)cx;
  *ret = json_pack("{s:O}", "text", json_object_get(args, "text"));
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const char bench_spec[] =
    "{\"provider\":\"bench\",\"tools\":[{\"name\":\"" ECHO_TOOL "\","
    "\"description\":\"Echoes its text.\",\"surfaces\":[\"agent\"],\"effect\":\"read\","
    "\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\",\"required\":[\"text\"],"
    "\"properties\":{\"text\":{\"type\":\"string\",\"maxLength\":100}}},"
    "\"outputSchema\":{\"type\":\"object\",\"required\":[\"text\"],"
    "\"properties\":{\"text\":{\"type\":\"string\"}}}}]}";

static const tg_handler_entry bench_handlers[] = {{ECHO_TOOL, bench_echo}};
static const tg_provider bench_provider = {.name = "bench", .spec_json = bench_spec,
                                           .handlers = bench_handlers, .n_handlers = 1};

typedef struct bench {
  char *dir;
  tg_db *db;
  tg_registry *registry;
  tg_env env;
  char tenant_id[TG_UUID_LEN + 1];
  char owner[TG_UUID_LEN + 1];
  char agent[TG_UUID_LEN + 1];
  json_t *echo_args;
  tg_handler_fn echo_handler; /* the registry's pointer, the one tg_call runs */
} bench;

static void report_envelope(const char *tool, const tg_call_result *res) {
  char *text = res->value ? json_dumps(res->value, JSON_COMPACT) : NULL;
  fprintf(stderr, "bench_call: %s failed: %s\n", tool, text ? text : "(no envelope)");
  free(text);
}

static int call_tool(bench *b, const char *principal, tg_surface surface, const char *tool,
                     json_t *args) {
  tg_call_request req = {.principal_id = principal, .surface = surface, .tool = tool,
                         .args = args};
  tg_call_result res;
  int r = tg_call(&b->env, &req, &res);
  if (r != 0) report_envelope(tool, &res);
  tg_call_result_done(&res);
  return r;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  if (remove(path) < 0)
    fprintf(stderr, "bench_call: cannot remove %s: %s\n", path, strerror(errno));
  return 0;
}

static void bench_free(bench *b) {
  json_decref(b->echo_args);
  tg_registry_free(b->registry);
  if (b->db) tg_db_close(b->db);
  if (b->dir) {
    nftw(b->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(b->dir);
  }
}

/* A workspace as a user would have it: the built-in providers plus the bench tool, a tenant,
 * and an active agent created through tg_call by the owner. */
static int bench_setup(bench *b) {
  const char *base = getenv("TMPDIR");
  if (asprintf(&b->dir, "%s/toolgate-bench-XXXXXX", base && *base ? base : "/tmp") < 0) {
    b->dir = NULL;
    fprintf(stderr, "bench_call: out of memory\n");
    return -1;
  }
  if (!mkdtemp(b->dir)) {
    fprintf(stderr, "bench_call: mkdtemp %s: %s\n", b->dir, strerror(errno));
    free(b->dir);
    b->dir = NULL;
    return -1;
  }
  char *why = NULL;
  int r = tg_db_open(b->dir, &b->db, &why);
  if (r < 0) {
    fprintf(stderr, "bench_call: opening the database: %s\n", why ? why : "unknown error");
    free(why);
    return -1;
  }
  if (tg_db_migrate(b->db, NULL) < 0) {
    fprintf(stderr, "bench_call: migrating: %s\n", tg_db_errmsg(b->db));
    return -1;
  }

  const tg_provider *providers[16];
  size_t n = 0;
  if (tg_builtin_providers_count >= sizeof providers / sizeof providers[0]) {
    fprintf(stderr, "bench_call: more built-in providers than this benchmark expects\n");
    return -1;
  }
  for (; n < tg_builtin_providers_count; n++) providers[n] = tg_builtin_providers[n];
  providers[n++] = &bench_provider;
  if (tg_registry_new(providers, n, &b->registry, &why) < 0) {
    fprintf(stderr, "bench_call: registry: %s\n", why ? why : "unknown error");
    free(why);
    return -1;
  }
  b->env = (tg_env){.registry = b->registry, .db = b->db};
  const tg_tool *echo = tg_registry_find(b->registry, ECHO_TOOL);
  if (!echo) {
    fprintf(stderr, "bench_call: %s is not in the registry\n", ECHO_TOOL);
    return -1;
  }
  b->echo_handler = echo->handler;

  if (tg_tenant_create(b->db, "bench", "owner", b->tenant_id, b->owner) < 0) {
    fprintf(stderr, "bench_call: creating the tenant: %s\n", tg_db_errmsg(b->db));
    return -1;
  }
  json_t *agent_args = json_pack("{s:s,s:s}", "slug", "bench", "status", "active");
  if (!agent_args) {
    fprintf(stderr, "bench_call: out of memory\n");
    return -1;
  }
  r = call_tool(b, b->owner, TG_SURFACE_API, "admin.agent.create", agent_args);
  json_decref(agent_args);
  if (r != 0) return -1;
  if (tg_principal_lookup(b->db, b->tenant_id, TG_PRINCIPAL_AGENT, "bench", b->agent) < 0) {
    fprintf(stderr, "bench_call: the agent just created cannot be found\n");
    return -1;
  }
  b->echo_args = json_pack("{s:s}", "text", ECHO_TEXT);
  if (!b->echo_args) {
    fprintf(stderr, "bench_call: out of memory\n");
    return -1;
  }
  return 0;
}

static int once_read(bench *b) {
  return call_tool(b, b->agent, TG_SURFACE_AGENT, ECHO_TOOL, b->echo_args);
}

static int once_list(bench *b) {
  return call_tool(b, b->agent, TG_SURFACE_AGENT, "agent.tool.list", NULL);
}

/* The handler as tg_call runs it, minus everything tg_call adds; echo ignores its context. */
static int once_handler(bench *b) {
  tg_call_ctx cx = {.env = &b->env};
  json_t *out = NULL;
  int r = b->echo_handler(&cx, b->echo_args, &out);
  json_decref(out);
  if (r != 0) fprintf(stderr, "bench_call: the handler failed (%d)\n", r);
  return r;
}

typedef struct bench_case {
  const char *key; /* --only, and the key bench/run.sh matches with bench.mjs */
  const char *label;
  int (*once)(bench *b);
} bench_case;

static const bench_case cases[] = {
    {"read", "read tool via tg_call", once_read},
    {"list", "agent.tool.list via tg_call", once_list},
    {"handler", "handler alone (no gate)", once_handler},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* User-space instructions of this process, when the kernel lets us count them. */
typedef struct counter {
  int fd;
  char unavailable[128]; /* why not, when fd < 0 */
} counter;

static void counter_disable(counter *c, const char *what) {
  snprintf(c->unavailable, sizeof c->unavailable, "%s", what);
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static void counter_open(counter *c) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.type = PERF_TYPE_HARDWARE;
  attr.size = sizeof attr;
  attr.config = PERF_COUNT_HW_INSTRUCTIONS;
  attr.disabled = 1;
  /* Counting only user space is what perf_event_paranoid <= 2 allows without privileges. */
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  c->fd = -1;
  long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0UL);
  if (fd >= 0) {
    c->fd = (int)fd;
    return;
  }
  int err = errno;
  if (err == EACCES || err == EPERM)
    counter_disable(c, "perf events not permitted");
  else if (err == ENOENT || err == EOPNOTSUPP || err == ENODEV)
    counter_disable(c, "no instruction counter on this CPU or VM");
  else {
    char what[96];
    snprintf(what, sizeof what, "perf_event_open: %s", strerror(err));
    counter_disable(c, what);
  }
}

static void counter_start(counter *c) {
  if (c->fd < 0) return;
  if (ioctl(c->fd, PERF_EVENT_IOC_RESET, 0) < 0 || ioctl(c->fd, PERF_EVENT_IOC_ENABLE, 0) < 0)
    counter_disable(c, "perf event ioctl failed");
}

/* Instructions since counter_start, scaled when the counter was multiplexed; -1 when n/a. */
static double counter_stop(counter *c) {
  if (c->fd < 0) return -1;
  if (ioctl(c->fd, PERF_EVENT_IOC_DISABLE, 0) < 0) {
    counter_disable(c, "perf event ioctl failed");
    return -1;
  }
  uint64_t v[3]; /* value, time enabled, time running */
  if (read(c->fd, v, sizeof v) != (ssize_t)sizeof v) {
    counter_disable(c, "reading the perf event failed");
    return -1;
  }
  if (v[2] == 0) {
    counter_disable(c, "the instruction counter was never scheduled");
    return -1;
  }
  return (double)v[0] * ((double)v[1] / (double)v[2]);
}

typedef struct result {
  const bench_case *c;
  long calls;
  double seconds;
  double instructions; /* per call; < 0: n/a */
  long peak_rss_kib;   /* of the process so far */
} result;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long peak_rss_kib(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

static int run_case(bench *b, const bench_case *c, long calls, long warmup, counter *ctr,
                    result *out) {
  for (long i = 0; i < warmup; i++)
    if (c->once(b) != 0) return -1;
  counter_start(ctr);
  double t0 = now_s();
  for (long i = 0; i < calls; i++)
    if (c->once(b) != 0) return -1;
  double t1 = now_s();
  double instructions = counter_stop(ctr);
  *out = (result){.c = c, .calls = calls, .seconds = t1 - t0,
                  .instructions = instructions < 0 ? -1 : instructions / (double)calls,
                  .peak_rss_kib = peak_rss_kib()};
  return 0;
}

static double per_second(const result *r) {
  return r->seconds > 0 ? (double)r->calls / r->seconds : 0;
}

static double us_per_call(const result *r) { return r->seconds * 1e6 / (double)r->calls; }

static int print_json(const result *res, size_t n, long calls, long warmup, const counter *ctr) {
  json_t *list = json_array();
  if (!list) return -1;
  for (size_t i = 0; i < n; i++) {
    const result *r = &res[i];
    json_t *row = json_pack("{s:s,s:s,s:I,s:f,s:f,s:f,s:o,s:I}", "key", r->c->key, "label",
                            r->c->label, "calls", (json_int_t)r->calls, "seconds", r->seconds,
                            "callsPerSec", per_second(r), "usPerCall", us_per_call(r),
                            "instructionsPerCall",
                            r->instructions < 0 ? json_null() : json_real(r->instructions),
                            "peakRssKiB", (json_int_t)r->peak_rss_kib);
    if (!row || json_array_append_new(list, row) < 0) {
      json_decref(list);
      return -1;
    }
  }
  json_t *doc = json_pack("{s:s,s:s,s:I,s:I,s:{s:b,s:s?},s:o}", "side", "toolgate",
                          "includes", includes, "calls", (json_int_t)calls, "warmup",
                          (json_int_t)warmup, "instructions", "available", ctr->fd >= 0,
                          "unavailable", ctr->fd >= 0 ? NULL : ctr->unavailable, "cases", list);
  if (!doc) return -1;
  int r = json_dumpf(doc, stdout, JSON_INDENT(2));
  json_decref(doc);
  if (r < 0 || putchar('\n') == EOF) return -1;
  return 0;
}

static void print_table(const result *res, size_t n, long warmup, const counter *ctr) {
  printf("toolgate bench_call: %ld calls per case after %ld warm-up calls\n", res[0].calls, warmup);
  printf("includes: %s\n\n", includes);
  /* "µ" is two bytes and one column: its field is one byte wider. */
  printf("%-28s %8s %9s %11s %10s %12s %14s\n", "case", "calls", "seconds", "calls/s", "µs/call",
         "instr/call", "peak RSS (MiB)");
  for (size_t i = 0; i < n; i++) {
    const result *r = &res[i];
    char instr[32];
    if (r->instructions < 0)
      snprintf(instr, sizeof instr, "n/a");
    else
      snprintf(instr, sizeof instr, "%.0f", r->instructions);
    printf("%-28s %8ld %9.3f %11.0f %9.2f %12s %14.1f\n", r->c->label, r->calls, r->seconds,
           per_second(r), us_per_call(r), instr, (double)r->peak_rss_kib / 1024.0);
  }
  if (ctr->fd < 0)
    printf("\ninstr/call: n/a (%s)\n", ctr->unavailable);
  else
    printf("\ninstr/call: user-space instructions (perf_event_open), mean over the timed loop\n");
}

static void usage(FILE *to) {
  fprintf(to,
          "usage: bench_call [--calls N] [--warmup N] [--only read|list|handler] [--json]\n"
          "  --calls N    timed calls per case (default %ld)\n"
          "  --warmup N   untimed calls per case first (default %ld)\n"
          "  --only CASE  run one case (bench/run.sh uses it under callgrind)\n"
          "  --json       print a JSON object instead of the table\n",
          DEFAULT_CALLS, DEFAULT_WARMUP);
}

static bool parse_count(const char *text, long min, long *out) {
  if (!text) return false;
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < min) return false;
  *out = v;
  return true;
}

int main(int argc, char **argv) {
  long calls = DEFAULT_CALLS, warmup = DEFAULT_WARMUP;
  const char *only = NULL;
  bool as_json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--calls") == 0 && parse_count(argv[i + 1], 1, &calls)) i++;
    else if (strcmp(a, "--warmup") == 0 && parse_count(argv[i + 1], 0, &warmup)) i++;
    else if (strcmp(a, "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(a, "--json") == 0) as_json = true;
    else if (strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "bench_call: bad argument: %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  const bench_case *selected[N_CASES];
  size_t n = 0;
  for (size_t i = 0; i < N_CASES; i++)
    if (!only || strcmp(only, cases[i].key) == 0) selected[n++] = &cases[i];
  if (n == 0) {
    fprintf(stderr, "bench_call: no case named %s\n", only);
    usage(stderr);
    return 2;
  }

  bench b = {0};
  result res[N_CASES];
  counter ctr;
  counter_open(&ctr);
  int status = bench_setup(&b);
  for (size_t i = 0; status == 0 && i < n; i++)
    status = run_case(&b, selected[i], calls, warmup, &ctr, &res[i]);
  if (status == 0) {
    if (as_json) status = print_json(res, n, calls, warmup, &ctr);
    else print_table(res, n, warmup, &ctr);
    if (status < 0) fprintf(stderr, "bench_call: could not write the JSON\n");
  }
  if (ctr.fd >= 0) close(ctr.fd);
  bench_free(&b);
  return status == 0 ? 0 : 1;
}
