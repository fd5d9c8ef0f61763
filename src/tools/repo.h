/* The repositories of scopes as the git-backed tools see them (provider "repo", also used by
 * provider "agents" for agent files): found or created on first use, recovered before use,
 * and written in the order of DESIGN.md §7 (src/git/git.h):
 *   tg_repo_prepare   objects, then the move recorded in the call's transaction;
 *   tg_repo_publish   the branch moved with a compare-and-swap, the handler's last step. */
#pragma once
#include <stdbool.h>

#include "core/call.h"
#include "core/scope.h"
#include "git/git.h"

typedef struct tg_scope_repo {
  char id[TG_UUID_LEN + 1];
  const char *kind;      /* "mission" or "work": who owns it */
  char owner_id[TG_UUID_LEN + 1];
  const char *name;      /* "mission", "data" or "website" */
  char label[96];        /* "work:SLUG/data", as operators name it */
  char rel_path[192];    /* under the data folder */
  char default_branch[TG_GIT_BRANCH_MAX + 1];
  tg_scope_ref scope;    /* the owner, resolved, for reach checks and activity rows */
  tg_git *git;
} tg_scope_repo;

/* A branch move prepared and recorded, to publish last. */
typedef struct tg_repo_move {
  char branch[TG_GIT_BRANCH_MAX + 1];
  char old_sha[TG_GIT_SHA_LEN + 1]; /* "" when the branch is created */
  char new_sha[TG_GIT_SHA_LEN + 1];
} tg_repo_move;

/* The repository name of kind ("mission" or "work") with owner_id, opened (created with its
 * first commit on first use) after recovering interrupted moves. */
int tg_repo_acquire(tg_call_ctx *cx, const char *kind, const char *owner_id, const char *name,
                    tg_scope_repo *ret);
void tg_repo_release(tg_scope_repo *repo);

/* Writes one commit of changes on top of branch's tip (of base_branch's tip when creating
 * branch) and records the move. A change that does not apply is a validation_failed
 * failure naming the path; a missing branch not_found; a branch to create that exists
 * precondition_failed. */
int tg_repo_prepare(tg_call_ctx *cx, tg_scope_repo *repo, const char *branch, bool create,
                    const tg_git_change *changes, size_t n, const char *message,
                    tg_repo_move *move);
/* Records a move the caller computed (a merge) in the call's transaction. */
int tg_repo_record(tg_call_ctx *cx, tg_scope_repo *repo, const tg_repo_move *move);
/* Moves the branch; a concurrent writer that moved it first makes it precondition_failed. */
int tg_repo_publish(tg_call_ctx *cx, tg_scope_repo *repo, const tg_repo_move *move);

/* The scope object ({missionId, ideaId, workId}) of a repository's activity rows: a new
 * reference (tg_activity borrows it). */
json_t *tg_repo_activity_scope(const tg_scope_repo *repo);
