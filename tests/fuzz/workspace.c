#define _GNU_SOURCE
#include "workspace.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/call.h"
#include "tools/conformance.h"
#include "tools/providers.h"

void fuzz_workspace_open(fuzz_workspace *w, const char *name) {
  char *why = NULL;
  char tenant[TG_UUID_LEN + 1];
  const tg_provider *providers[16];
  size_t n = 0;
  if (tg_builtin_providers_count >= sizeof providers / sizeof providers[0]) abort();
  for (; n < tg_builtin_providers_count; n++) providers[n] = tg_builtin_providers[n];
  providers[n++] = &tg_provider_conformance;
  snprintf(w->dir, sizeof w->dir, "/tmp/tg-%s-XXXXXX", name);
  if (!mkdtemp(w->dir) || tg_db_open(w->dir, &w->db, &why) < 0 || tg_db_migrate(w->db, NULL) < 0 ||
      tg_tenant_create(w->db, "fuzz", "owner", tenant, w->owner) < 0 ||
      tg_registry_new(providers, n, &w->registry, &why) < 0) {
    fprintf(stderr, "%s: setup failed: %s\n", name, why ? why : "?");
    abort();
  }
}

json_t *fuzz_owner_call(fuzz_workspace *w, const char *tool, const char *args) {
  tg_env env = {.registry = w->registry, .db = w->db, .data_dir = w->dir};
  json_t *parsed = json_loads(args, 0, NULL);
  tg_call_request req = {.principal_id = w->owner, .surface = TG_SURFACE_API, .tool = tool,
                         .args = parsed};
  tg_call_result res;
  if (!parsed || tg_call(&env, &req, &res) < 0) abort();
  json_t *value = json_incref(res.value);
  tg_call_result_done(&res);
  json_decref(parsed);
  return value;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

void fuzz_workspace_close(fuzz_workspace *w) {
  tg_registry_free(w->registry);
  tg_db_close(w->db);
  nftw(w->dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}
