/* The repositories of scopes as the git-backed tools see them (provider "repo", also used by
 * provider "agents" for agent files): found or created on first use, and written in the
 * order of DESIGN.md §7 (src/git/git.h):
 *   tg_repo_prepare   objects, then the move recorded in the call's transaction;
 *   tg_repo_publish   the branch moved with a compare-and-swap once that transaction has
 *                     committed (an after-commit step of the call, src/core/call.h).
 * Acquiring a repository first finishes any recorded move a dead process left unapplied. */
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
  char id[TG_UUID_LEN + 1]; /* its repo_ref_moves row, set by tg_repo_record */
  char branch[TG_GIT_BRANCH_MAX + 1];
  char old_sha[TG_GIT_SHA_LEN + 1]; /* "" when the branch is created */
  char new_sha[TG_GIT_SHA_LEN + 1];
} tg_repo_move;

/* The repository name of kind ("mission" or "work") with owner_id, opened (created with its
 * first commit on first use), its unapplied recorded moves finished. */
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
/* The tip branch has once the moves recorded before are made: the newest move of branch
 * still to make (of a call earlier in this shared transaction, tg_db_batch, or one whose
 * after-commit step has not run yet), else the branch's own. What a call builds on it
 * follows those moves instead of failing their compare-and-swap. TG_E_NOTFOUND: no branch. */
int tg_repo_tip(tg_call_ctx *cx, tg_scope_repo *repo, const char *branch,
                char sha[TG_GIT_SHA_LEN + 1]);
/* Records a move the caller computed (a merge) in the call's transaction; sets move->id. */
int tg_repo_record(tg_call_ctx *cx, tg_scope_repo *repo, tg_repo_move *move);
/* Moves the branch after the call's transaction commits; repo's handle goes with it, so this
 * is the handler's last use of repo. Should the move not be made (a writer outside toolgate
 * moved the branch first: precondition_failed concurrent_write; the branch stayed locked:
 * precondition_failed branch_locked; a failure), the call fails, the move is marked
 * abandoned, undo_sql (with undo_params, stolen; both may be NULL) reverts what the handler
 * recorded about it, and the call's activity rows queued so far are taken back. Both are
 * recorded with the move, so that a later use of the repository that gives the move up,
 * after the call's process died, takes them back too. */
int tg_repo_publish(tg_call_ctx *cx, tg_scope_repo *repo, const tg_repo_move *move,
                    const char *undo_sql, json_t *undo_params);

/* The scope object ({missionId, ideaId, workId}) of a repository's activity rows: a new
 * reference (tg_activity borrows it). */
json_t *tg_repo_activity_scope(const tg_scope_repo *repo);
