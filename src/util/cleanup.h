/* Scope-bound cleanup for early returns (GNU C cleanup attribute). */
#pragma once
#include <jansson.h>
#include <stdlib.h>

static inline void tg_freep(void *p) { free(*(void **)p); }
static inline void tg_json_decrefp(json_t **p) { json_decref(*p); }

#define _cleanup_free_ __attribute__((cleanup(tg_freep)))
#define _cleanup_json_ __attribute__((cleanup(tg_json_decrefp)))

/* Hands ownership out of a cleanup-guarded variable. */
#define TAKE_PTR(p)                 \
  ({                                \
    __typeof__(p) tg_take_tmp_ = (p); \
    (p) = NULL;                     \
    tg_take_tmp_;                   \
  })
