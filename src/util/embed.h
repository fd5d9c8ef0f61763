/* Files embedded into the binary at build time (cmake/embed.cmake): provider tool specs,
 * SQL migrations. Each table ends with an entry whose name is NULL. */
#pragma once
#include <stddef.h>

typedef struct tg_embedded_file {
  const char *name; /* file name without folder, e.g. "0001_foundation.sql" */
  const char *data; /* NUL-terminated */
  size_t size;      /* without the terminating NUL */
} tg_embedded_file;

extern const tg_embedded_file tg_embedded_specs[];      /* the provider specs of src/tools, the spec schema */
extern const tg_embedded_file tg_embedded_migrations[]; /* the numbered SQL files, by name */

/* Returns the entry named name in table, or NULL. */
const tg_embedded_file *tg_embed_find(const tg_embedded_file *table, const char *name);
