#include "domain/task_state.h"

#include <string.h>

static const char *const names[TG_TASK_STATUS_COUNT] = {
    [TG_TASK_BACKLOG] = "backlog",     [TG_TASK_TODO] = "todo",
    [TG_TASK_IN_PROGRESS] = "in_progress", [TG_TASK_IN_REVIEW] = "in_review",
    [TG_TASK_BLOCKED] = "blocked",     [TG_TASK_DONE] = "done",
    [TG_TASK_CANCELLED] = "cancelled",
};

enum { L = TG_EDGE_LEGAL, B = TG_EDGE_BLOCKERS, A = TG_EDGE_APPROVERS, D = TG_EDGE_DISPATCH };

/* Rows are from, columns to, in the order of tg_task_status. The quality gate of
 * in_progress → in_review (§1.3) is left out: it reads a work's checks policy and its runs'
 * gate status, which toolgate does not have. cancelled is terminal; done only re-opens. */
static const unsigned char edges[TG_TASK_STATUS_COUNT][TG_TASK_STATUS_COUNT] = {
    /*                 backlog todo  in_progress in_review blocked done       cancelled */
    /* backlog     */ {0,      L,    0,          0,        0,      0,         L},
    /* todo        */ {0,      0,    L | B | D,  0,        L,      0,         L},
    /* in_progress */ {0,      0,    0,          L,        L,      L | B | A, L},
    /* in_review   */ {0,      0,    L | B | D,  0,        L,      L | B | A, L},
    /* blocked     */ {0,      L,    L | B | D,  0,        0,      0,         L},
    /* done        */ {0,      0,    L | B | D,  0,        0,      0,         0},
    /* cancelled   */ {0,      0,    0,          0,        0,      0,         0},
};

static bool valid(tg_task_status s) { return (unsigned)s < TG_TASK_STATUS_COUNT; }

const char *tg_task_status_name(tg_task_status status) {
  return valid(status) ? names[status] : NULL;
}

bool tg_task_status_parse(const char *name, tg_task_status *ret) {
  for (unsigned i = 0; name && i < TG_TASK_STATUS_COUNT; i++) {
    if (strcmp(names[i], name) == 0) {
      *ret = (tg_task_status)i;
      return true;
    }
  }
  return false;
}

unsigned tg_task_edge(tg_task_status from, tg_task_status to) {
  return valid(from) && valid(to) ? edges[from][to] : 0;
}

bool tg_task_can_transition(tg_task_status from, tg_task_status to) {
  return tg_task_edge(from, to) != 0;
}

unsigned tg_task_targets(tg_task_status from) {
  unsigned set = 0;
  for (unsigned to = 0; to < TG_TASK_STATUS_COUNT; to++)
    if (tg_task_edge(from, (tg_task_status)to)) set |= 1u << to;
  return set;
}

bool tg_task_status_open(tg_task_status status) {
  return status != TG_TASK_DONE && status != TG_TASK_CANCELLED;
}
