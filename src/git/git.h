/* The repositories behind the git-backed tools: bare repositories under the data folder,
 * written only by toolgate through libgit2 (never by running the git program).
 *
 * A write follows DESIGN.md §7 in three steps:
 *   1. tg_git_commit writes the blobs, trees and the commit object; no ref moves;
 *   2. the caller records the move (branch, old sha, new sha) in its database transaction;
 *   3. after that transaction commits, tg_git_move moves the branch with a compare-and-swap
 *      on its old value.
 * A branch therefore never points at a commit the database does not hold. A process that
 * dies between 2 and 3 leaves a recorded move whose branch is still at its old value; the
 * next use of the repository finishes it (src/tools/repo.c). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define TG_GIT_SHA_LEN 40
#define TG_GIT_BRANCH_MAX 100 /* bytes of a branch name */

typedef struct tg_git tg_git;

/* Opens the bare repository at path, creating it (and its parent folders) when missing,
 * with HEAD naming default_branch. Returns 0, TG_E_IO or TG_E_NOMEM. */
int tg_git_open(const char *path, const char *default_branch, tg_git **ret);
void tg_git_close(tg_git *g);

/* Whether name is a branch name toolgate accepts: git's ref rules, ASCII letters, digits and
 * "._-/", at most TG_GIT_BRANCH_MAX bytes. 0, TG_E_INVAL when it is not, or TG_E_IO when
 * libgit2 cannot be loaded to tell. */
int tg_git_branch_check(const char *name);

/* The commit sha a branch points at. TG_E_NOTFOUND when there is no such branch. */
int tg_git_tip(tg_git *g, const char *branch, char sha[TG_GIT_SHA_LEN + 1]);
/* The branch names, at most max, as a new array of strings; *truncated when there are more. */
int tg_git_branches(tg_git *g, size_t max, json_t **ret, bool *truncated);
/* Whether branches a and b cannot both be: one's name is a folder of the other's ("f1" and
 * "f1/sub"), for git keeps a branch as a file. */
bool tg_git_names_clash(const char *a, const char *b);

/* The file at path in commit sha: a malloc'd NUL-terminated copy and its size. TG_E_NOTFOUND
 * when it is missing or not a regular file; TG_E_TOO_LARGE over max bytes. */
int tg_git_read(tg_git *g, const char *sha, const char *path, size_t max, char **ret,
                size_t *ret_len);

typedef enum tg_git_mode { TG_GIT_ADD, TG_GIT_MODIFY, TG_GIT_DELETE } tg_git_mode;

typedef struct tg_git_change {
  const char *path; /* validated by the caller (domain/repo_path.h) */
  const char *content;
  size_t len;
  tg_git_mode mode;
} tg_git_change;

/* Why a change cannot apply to the parent tree: the index of the change and a reason,
 * one of "exists" (an add of an existing path), "missing" (a modify or delete of a missing
 * one), "not_a_file" (the path is a folder or a submodule), "symlink" (the path, or a folder
 * on its way, is a symbolic link in the tree), "under_a_file" (a folder on its way is a file),
 * "duplicate" (two changes to the same path or one under the other), "no_change" (together
 * they leave the parent's tree as it is; index 0). */
typedef struct tg_git_problem {
  size_t index;
  const char *reason;
} tg_git_problem;

/* Writes one commit applying every change to the tree of parent_sha (NULL: a root commit
 * on an empty tree), authored and committed by name <email>. Moves no ref. Returns 0 and
 * the sha, TG_E_INVAL with *problem filled when a change does not apply, or TG_E_IO. */
int tg_git_commit(tg_git *g, const char *parent_sha, const tg_git_change *changes, size_t n,
                  const char *name, const char *email, const char *message,
                  char sha[TG_GIT_SHA_LEN + 1], tg_git_problem *problem);

/* Moves branch from old_sha (NULL: the branch must not exist) to new_sha. TG_E_CONSTRAINT
 * when the branch is not at old_sha any more (another writer moved it); TG_E_LOCKED when its
 * lock file stayed taken for wait_ms (another writer moving it holds it for a moment; one
 * that crashed leaves it). */
int tg_git_move(tg_git *g, const char *branch, const char *old_sha, const char *new_sha,
                const char *why, int wait_ms);

/* Deletes branch if it still points at old_sha: TG_E_CONSTRAINT when it does not (another
 * writer moved or deleted it), TG_E_LOCKED as tg_git_move. */
int tg_git_remove(tg_git *g, const char *branch, const char *old_sha, int wait_ms);

/* Whether branch's tip is commit sha or has it in its history (false: no such branch). */
int tg_git_contains(tg_git *g, const char *branch, const char *sha, bool *yes);

/* The unified diff from commit from_sha to commit to_sha (malloc'd), cut at max bytes with
 * *truncated set, and the number of files changed. */
int tg_git_diff(tg_git *g, const char *from_sha, const char *to_sha, size_t max, char **ret,
                bool *truncated, size_t *files);

/* Merges head_sha into base_sha: *fast_forward and sha = head_sha when base_sha is an
 * ancestor of head_sha; else a merge commit with both parents. TG_E_CONSTRAINT with the
 * conflicting paths in *conflicts (a new array, at most 50) when the merge does not apply
 * cleanly. *up_to_date (sha = base_sha) when head_sha is already in base_sha. */
int tg_git_merge(tg_git *g, const char *base_sha, const char *head_sha, const char *name,
                 const char *email, const char *message, char sha[TG_GIT_SHA_LEN + 1],
                 bool *fast_forward, bool *up_to_date, json_t **conflicts);

/* Test hook: called just before a branch moves or is deleted, so a test can play a
 * concurrent writer. NULL in production. */
extern void (*tg_git_test_before_move)(const char *repo_path, const char *branch);
