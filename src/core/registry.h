/* The tool registry: every tool of every provider, validated and compiled at start-up,
 * immutable afterwards, looked up in O(1) by canonical, model-facing or alias name. */
#pragma once
#include <stddef.h>

#include "core/tool.h"

typedef struct tg_registry tg_registry;

/* Builds the registry from providers. Fails, naming the provider and tool at fault in
 * *reterr (malloc'd), on a spec that does not match src/core/tool-spec.schema.json, a name
 * used twice (across all three kinds of name), a handler without a declaration or the
 * reverse, or a schema that does not compile. */
int tg_registry_new(const tg_provider *const *providers, size_t n_providers,
                    tg_registry **ret, char **reterr);
void tg_registry_free(tg_registry *reg);

/* The tool answering to name (canonical, model-facing or alias), or NULL (also for NULL). */
const tg_tool *tg_registry_find(const tg_registry *reg, const char *name);
size_t tg_registry_count(const tg_registry *reg);
const tg_tool *tg_registry_at(const tg_registry *reg, size_t index);
