/* The workspace the server fuzzers serve: a database in a temporary folder, its owner, and
 * the built-in tools with the conformance fixtures. */
#pragma once
#include "core/principal.h"
#include "core/registry.h"
#include "db/db.h"

typedef struct fuzz_workspace {
  char dir[64];
  tg_db *db;
  tg_registry *registry;
  char owner[TG_UUID_LEN + 1];
} fuzz_workspace;

/* Makes it in a new folder named after name; aborts on failure. */
void fuzz_workspace_open(fuzz_workspace *w, const char *name);
/* The owner's call of tool with args (JSON text), through the call path; aborts unless it
 * runs. Answers its result, which the caller releases. */
json_t *fuzz_owner_call(fuzz_workspace *w, const char *tool, const char *args);
/* Closes it and removes its folder, with all that serving left there (tasks' runner files). */
void fuzz_workspace_close(fuzz_workspace *w);
