#define _GNU_SOURCE
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/principal.h"
#include "tools/providers.h"
#include "util/cleanup.h"
#include "util/json.h"
#include "util/status.h"

int cli_usage(const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("toolgate: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (usage) fprintf(stderr, "%s", usage);
  return CLI_USAGE;
}

void cli_more_note(json_t *result) {
  if (json_is_true(json_object_get(result, "truncated"))) puts("(more: raise --limit)");
}

bool cli_integer_option(const char *usage, const char *command, const char *option,
                        const char *key, const char *value, json_t *args) {
  char *end = NULL;
  errno = 0;
  long long n = strtoll(value, &end, 10);
  if (!*value || *end || errno == ERANGE) {
    cli_usage(usage, "%s: --%s takes a number", command, option);
    return false;
  }
  json_object_set_new(args, key, json_integer(n));
  return true;
}

int cli_getopt(int argc, char **argv, const struct option *options, const char *repeatable,
               const char *command, unsigned long long *seen) {
  int index = -1;
  int opt = getopt_long(argc, argv, "", options, &index);
  if (opt == -1 || opt == '?' || index < 0 || options[index].has_arg == no_argument) return opt;
  if (repeatable && opt > 0 && strchr(repeatable, opt)) return opt;
  if (*seen & (1ull << index)) {
    fprintf(stderr, "toolgate: %s: --%s is given twice\n", command, options[index].name);
    return '?';
  }
  *seen |= 1ull << index;
  return opt;
}

int cli_parse_options(int argc, char **argv, const char *usage, const char *command,
                      const cli_option_key *keys, size_t n_keys, json_t *args,
                      const char **positional, bool *json) {
  struct option options[16] = {{0}};
  if (n_keys > 14) return cli_usage(NULL, "%s: more options than the parser takes", command);
  size_t n = 0;
  for (; n < n_keys; n++)
    options[n] = (struct option){keys[n].option, required_argument, NULL, (int)n};
  if (json) options[n++] = (struct option){"json", no_argument, NULL, 'j'};
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, command, &seen)) != -1) {
    if (opt == 'j') {
      *json = true;
    } else if (opt >= 0 && (size_t)opt < n_keys && !keys[opt].integer) {
      json_object_set_new(args, keys[opt].key, json_string(optarg));
    } else if (opt >= 0 && (size_t)opt < n_keys) {
      if (!cli_integer_option(usage, command, keys[opt].option, keys[opt].key, optarg, args))
        return CLI_USAGE;
    } else {
      return cli_usage(usage, "%s: bad option", command);
    }
  }
  if (optind < argc && positional && !*positional) *positional = argv[optind++];
  if (optind < argc) return cli_usage(usage, "%s: unexpected '%s'", command, argv[optind]);
  return CLI_OK;
}

bool cli_wants_help(int argc, char **argv, const char *usage) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return true;
    }
  }
  return false;
}

int cli_open_registry(cli *c) {
  if (c->registry) return CLI_OK;
  _cleanup_free_ char *why = NULL;
  if (tg_registry_new(tg_builtin_providers, tg_builtin_providers_count, &c->registry, &why) < 0) {
    fprintf(stderr, "toolgate: the tool registry did not load: %s\n", why ? why : "out of memory");
    return CLI_FAILED;
  }
  c->env.registry = c->registry;
  return CLI_OK;
}

static int find_tenant(cli *c) {
  int r = tg_tenant_lookup(c->db, c->tenant, c->tenant_id);
  if (r == TG_OK) return CLI_OK;
  if (r == TG_E_NOTFOUND && c->tenant)
    fprintf(stderr, "toolgate: no workspace '%s'\n", c->tenant);
  else if (r == TG_E_NOTFOUND)
    fprintf(stderr, "toolgate: no workspace yet: run 'toolgate init --demo' (or init --tenant SLUG)\n");
  else if (r == TG_E_INVAL)
    fprintf(stderr, "toolgate: several workspaces: name one with --tenant SLUG\n");
  else
    fprintf(stderr, "toolgate: database error: %s\n", tg_db_errmsg(c->db));
  return CLI_FAILED;
}

int cli_open(cli *c, bool create) {
  if (create && mkdir(c->data_dir, 0700) < 0 && errno != EEXIST) {
    fprintf(stderr, "toolgate: cannot create %s: %s\n", c->data_dir, strerror(errno));
    return CLI_FAILED;
  }
  _cleanup_free_ char *db_path = NULL;
  if (asprintf(&db_path, "%s/toolgate.db", c->data_dir) < 0) return CLI_FAILED;
  struct stat st;
  /* An empty file is no database either: only init turns one into a workspace. */
  if (!create && (stat(db_path, &st) < 0 || st.st_size == 0)) {
    /* A client that starts `toolgate mcp` picks its working folder and may drop TOOLGATE_DATA:
     * say which folder was looked in, and how another is named. */
    _cleanup_free_ char *cwd = c->data_dir[0] == '/' ? NULL : getcwd(NULL, 0);
    fprintf(stderr,
            "toolgate: no database in %s%s%s: run 'toolgate init --demo' first, or name the "
            "data folder with --data DIR (or TOOLGATE_DATA)\n",
            cwd ? cwd : "", cwd && strcmp(cwd, "/") != 0 ? "/" : "", c->data_dir);
    return CLI_FAILED;
  }
  _cleanup_free_ char *why = NULL;
  if (tg_db_open(c->data_dir, &c->db, &why) < 0) {
    fprintf(stderr, "toolgate: cannot open the database in %s: %s\n", c->data_dir,
            why ? why : "out of memory");
    return CLI_FAILED;
  }
  c->env.db = c->db;
  c->env.data_dir = c->data_dir;
  c->env.public_url = getenv("TOOLGATE_PUBLIC_URL");
  if (!c->env.public_url || !*c->env.public_url) c->env.public_url = "http://127.0.0.1:7878";
  if (tg_db_migrate(c->db, NULL) < 0) {
    fprintf(stderr, "toolgate: migration failed: %s\n", tg_db_errmsg(c->db));
    return CLI_FAILED;
  }
  if (cli_open_registry(c) != CLI_OK) return CLI_FAILED;
  return create || ((c->token || c->any_tenant) && !c->tenant) ? CLI_OK : find_tenant(c);
}

void cli_close(cli *c) {
  tg_registry_free(c->registry);
  tg_db_close(c->db);
  c->registry = NULL;
  c->db = NULL;
}

int cli_operator_call(cli *c, const char *tool, json_t *args, json_t **ret) {
  char principal[TG_UUID_LEN + 1];
  if (tg_principal_owner(c->db, c->tenant_id, principal) < 0) {
    fprintf(stderr, "toolgate: the workspace has no owner\n");
    return CLI_FAILED;
  }
  tg_call_request req = {.principal_id = principal, .surface = TG_SURFACE_API, .tool = tool,
                         .args = args};
  tg_call_result res;
  if (tg_call(&c->env, &req, &res) == TG_OK) {
    *ret = TAKE_PTR(res.value);
    tg_call_result_done(&res);
    return CLI_OK;
  }
  cli_print_json(res.value);
  tg_call_result_done(&res);
  return CLI_FAILED;
}

int cli_operate(cli *c, const char *tool, json_t *args, bool json, void (*show)(json_t *)) {
  if (!args) return CLI_FAILED;
  _cleanup_json_ json_t *result = NULL;
  int r = cli_open(c, false) == CLI_OK ? cli_operator_call(c, tool, args, &result) : CLI_FAILED;
  json_decref(args);
  if (r != CLI_OK) return r;
  if (json || !show) cli_print_json(result);
  else show(result);
  return CLI_OK;
}

int cli_list(cli *c, int argc, char **argv, const char *usage, const char *command,
             const char *tool, void (*show)(json_t *)) {
  static const cli_option_key keys[] = {{"limit", "limit", true}};
  json_t *args = json_object();
  bool json = false;
  int r = cli_parse_options(argc, argv, usage, command, keys, 1, args, NULL, &json);
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  return cli_operate(c, tool, args, json, show);
}

int cli_json_only(int argc, char **argv, const char *usage, const char *command, bool *json) {
  *json = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") != 0)
      return cli_usage(usage, "%s %s: unexpected '%s'", command, argv[0], argv[i]);
    *json = true;
  }
  return CLI_OK;
}

void cli_print_json(const json_t *value) {
  char *text = json_dumps(value, JSON_INDENT(2) | JSON_ENCODE_ANY);
  if (text) puts(text);
  free(text);
}

char *cli_read_file(const char *path, size_t max_bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "toolgate: cannot read %s: %s\n", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(max_bytes + 1);
  errno = 0;
  size_t n = buf ? fread(buf, 1, max_bytes + 1, f) : 0;
  int err = ferror(f) ? (errno ? errno : EIO) : 0; /* a folder: EISDIR */
  fclose(f);
  if (!buf || err || n > max_bytes) {
    fprintf(stderr, "toolgate: %s: %s\n", path,
            !buf  ? "out of memory"
            : err ? strerror(err)
                  : "file too large");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  /* Its text goes into JSON (a document, a skill, a schema): UTF-8, which has no NUL. */
  if (memchr(buf, '\0', n) || !tg_utf8_valid(buf, n)) {
    fprintf(stderr, "toolgate: %s: not UTF-8 text\n", path);
    free(buf);
    return NULL;
  }
  return buf;
}

int cli_dispatch(cli *c, int argc, char **argv, const cli_command *subs, size_t n_subs,
                 const char *usage) {
  if (argc < 2) {
    fputs(usage, stderr);
    return CLI_USAGE;
  }
  if (cli_wants_help(argc, argv, usage)) return CLI_OK;
  for (size_t i = 0; i < n_subs; i++)
    if (strcmp(argv[1], subs[i].name) == 0) {
      optind = 1;
      return subs[i].run(c, argc - 1, argv + 1);
    }
  return cli_usage(usage, "%s: unknown subcommand '%s'", argv[0], argv[1]);
}

void cli_token_from_env(cli *c) {
  const char *token = getenv("TOOLGATE_TOKEN");
  if (!token || !*token) return;
  c->token = token;
  c->token_from_env = true;
}

int cli_token_principal(cli *c, char id[TG_UUID_LEN + 1]) {
  if (tg_principal_by_token(c->db, c->token, id) < 0) {
    fprintf(stderr, "toolgate: the token%s is unknown or revoked\n",
            c->token_from_env ? " in TOOLGATE_TOKEN" : "");
    return CLI_FAILED;
  }
  if (!c->tenant) return CLI_OK;
  tg_principal *p = NULL;
  if (tg_principal_load(c->db, id, &p) < 0) {
    fprintf(stderr, "toolgate: database error: %s\n", tg_db_errmsg(c->db));
    return CLI_FAILED;
  }
  bool same = strcmp(p->tenant_id, c->tenant_id) == 0;
  tg_principal_free(p);
  if (!same) fprintf(stderr, "toolgate: the token belongs to another workspace than '%s'\n", c->tenant);
  return same ? CLI_OK : CLI_FAILED;
}
