/* The task state machine (research/ever-works-semantics.md §1.2) as one table: which moves
 * are legal and which gates and effects each legal move carries. Pure: no I/O. */
#pragma once
#include <stdbool.h>

typedef enum tg_task_status {
  TG_TASK_BACKLOG,
  TG_TASK_TODO,
  TG_TASK_IN_PROGRESS,
  TG_TASK_IN_REVIEW,
  TG_TASK_BLOCKED,
  TG_TASK_DONE,
  TG_TASK_CANCELLED,
} tg_task_status;
#define TG_TASK_STATUS_COUNT 7

/* What a legal edge carries. An illegal edge is 0. */
enum {
  TG_EDGE_LEGAL = 1u << 0,
  TG_EDGE_BLOCKERS = 1u << 1,  /* refused while the task has an open blocker */
  TG_EDGE_APPROVERS = 1u << 2, /* refused until every approver has approved */
  TG_EDGE_DISPATCH = 1u << 3,  /* starts the task: queues a run per agent assignee */
};

/* The wire name ("in_progress"); NULL for a value out of range. */
const char *tg_task_status_name(tg_task_status status);
/* Whether name is a status; fills *ret when it is. */
bool tg_task_status_parse(const char *name, tg_task_status *ret);

/* The TG_EDGE_* bits of from → to; 0 when the move is not allowed (moving to the status the
 * task already has is never allowed). */
unsigned tg_task_edge(tg_task_status from, tg_task_status to);
bool tg_task_can_transition(tg_task_status from, tg_task_status to);
/* The legal targets of from, as a set of bits 1u << status. */
unsigned tg_task_targets(tg_task_status from);

/* Whether a task in status counts as an open blocker of the tasks it blocks. */
bool tg_task_status_open(tg_task_status status);
