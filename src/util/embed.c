#include "util/embed.h"

#include <string.h>

const tg_embedded_file *tg_embed_find(const tg_embedded_file *table, const char *name) {
  for (const tg_embedded_file *f = table; f->name; f++)
    if (strcmp(f->name, name) == 0) return f;
  return NULL;
}
