/* toolgate init, toolgate migrate: bootstrap, the only commands that write to the database
 * outside tg_call. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util/cleanup.h"
#include "util/status.h"

static const char init_usage[] =
    "usage: toolgate init [--demo] [--tenant SLUG] [--owner NAME]\n\n"
    "Creates the database in the data folder and applies the migrations.\n"
    "  --tenant SLUG  also create a workspace with an owner user, and print the owner's token\n"
    "  --owner NAME   the owner's user name (default: owner)\n"
    "  --demo         the workspace 'demo', its owner 'owner' and an active tenant-scope agent\n"
    "                 'demo' holding every seed-000 permission flag\n";

/* The demo agent, created through the gate as the new owner. */
static int create_demo_agent(cli *c) {
  _cleanup_json_ json_t *args = json_pack("{s:s,s:s,s:s,s:o}", "slug", "demo", "name",
                                          "Demo agent", "scope", "tenant", "grants",
                                          tg_agent_flags_all());
  _cleanup_json_ json_t *result = NULL;
  return args ? cli_operator_call(c, "admin.agent.create", args, &result) : CLI_FAILED;
}

int cmd_init(cli *c, int argc, char **argv) {
  if (cli_wants_help(argc, argv, init_usage)) return CLI_OK;
  static const struct option options[] = {
      {"demo", no_argument, NULL, 'd'}, {"owner", required_argument, NULL, 'o'}, {0}};
  bool demo = false;
  const char *owner = "owner";
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "init", &seen)) != -1) {
    if (opt == 'd') demo = true;
    else if (opt == 'o') owner = optarg;
    else return cli_usage(init_usage, "init: bad option");
  }
  if (optind < argc) return cli_usage(init_usage, "init: unexpected '%s'", argv[optind]);
  if (demo && c->tenant && strcmp(c->tenant, "demo") != 0)
    return cli_usage(init_usage, "init: --demo creates the workspace 'demo'");
  if (demo) c->tenant = "demo";
  if (cli_open(c, true) != CLI_OK) return CLI_FAILED;
  int version = 0;
  tg_db_schema_version(c->db, &version);
  printf("database %s/toolgate.db at schema version %d\n", c->data_dir, version);
  if (!c->tenant) return CLI_OK;

  char owner_principal[TG_UUID_LEN + 1];
  int r = tg_tenant_create(c->db, c->tenant, owner, c->tenant_id, owner_principal);
  if (r == TG_E_CONSTRAINT) {
    fprintf(stderr, "toolgate: workspace '%s' already exists in %s\n", c->tenant, c->data_dir);
    return CLI_FAILED;
  }
  if (r < 0) {
    fprintf(stderr, "toolgate: cannot create the workspace: %s\n", tg_db_errmsg(c->db));
    return CLI_FAILED;
  }
  printf("workspace %s with owner %s\n", c->tenant, owner);
  if (demo && create_demo_agent(c) != CLI_OK) return CLI_FAILED;
  if (demo) printf("agent demo (tenant scope, every seed-000 permission flag)\n");
  _cleanup_json_ json_t *args = json_pack("{s:s}", "username", owner);
  _cleanup_json_ json_t *token = NULL;
  if (cli_operator_call(c, "admin.token.create", args, &token) != CLI_OK) return CLI_FAILED;
  printf("owner API token (shown once, keep it): %s\n",
         json_string_value(json_object_get(token, "token")));
  return CLI_OK;
}

static const char migrate_usage[] =
    "usage: toolgate migrate\n\nApplies the pending database migrations.\n";

int cmd_migrate(cli *c, int argc, char **argv) {
  if (cli_wants_help(argc, argv, migrate_usage)) return CLI_OK;
  if (argc > 1) return cli_usage(migrate_usage, "migrate: unexpected '%s'", argv[1]);
  _cleanup_free_ char *why = NULL;
  if (tg_db_open(c->data_dir, &c->db, &why) < 0) {
    fprintf(stderr, "toolgate: cannot open the database in %s: %s\n", c->data_dir,
            why ? why : "out of memory");
    return CLI_FAILED;
  }
  int applied = 0, version = 0;
  if (tg_db_migrate(c->db, &applied) < 0) {
    fprintf(stderr, "toolgate: migration failed: %s\n", tg_db_errmsg(c->db));
    return CLI_FAILED;
  }
  tg_db_schema_version(c->db, &version);
  printf("applied %d migration%s; schema version %d\n", applied, applied == 1 ? "" : "s", version);
  return CLI_OK;
}
