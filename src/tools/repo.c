/* Provider "repo": commitToRepo and openPullRequest for agents (seed 000 §3.5, §3.6), and
 * the operator's repository list and pull request review, merge and close. */
#define _GNU_SOURCE
#include "tools/repo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "domain/repo_path.h"
#include "tools/lookup.h"
#include "tools/providers.h"
#include "tools/secrets.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/log.h"
#include "util/status.h"

#define TOTAL_BYTES_MAX (8u * 1024 * 1024) /* content of one call, all files together */
#define DIFF_MAX (256u * 1024)              /* bytes of a diff shown */
#define MESSAGE_MAX 8192                    /* bytes of a commit message with its trailers */
#define BRANCHES_MAX 100                    /* branches listed per repository */

static void repo_releasep(tg_scope_repo *repo) { tg_repo_release(repo); }
#define _cleanup_repo_ __attribute__((cleanup(repo_releasep)))

/* Only slugs of the schema's shape become folder names. */
static bool slug_ok(const char *s) {
  if (!s || !*s || strlen(s) > 63) return false;
  for (; *s; s++)
    if (!(('a' <= *s && *s <= 'z') || ('0' <= *s && *s <= '9') || *s == '-')) return false;
  return true;
}

/* Who a commit is by: the calling agent or user, at addresses that cannot receive mail. */
static void identity(const tg_call_ctx *cx, char *name, size_t name_size, char *email,
                     size_t email_size) {
  bool agent = cx->principal->kind == TG_PRINCIPAL_AGENT;
  snprintf(name, name_size, "%s", cx->principal->name);
  snprintf(email, email_size, "%s@%s.toolgate.invalid", cx->principal->name,
           agent ? "agents" : "users");
}

/* The message as given plus trailers that tie the commit to the call that made it. */
static char *full_message(const tg_call_ctx *cx, const char *message) {
  char *out = NULL;
  if (asprintf(&out, "%s\n\nToolgate-Tool: %s%s%s\n", message, cx->tool->name,
               cx->run_id ? "\nToolgate-Run: " : "", cx->run_id ? cx->run_id : "") < 0)
    return NULL;
  return out;
}

json_t *tg_repo_activity_scope(const tg_scope_repo *repo) {
  json_t *scope = json_object();
  if (!scope) return NULL;
  if (*repo->scope.mission_id) json_object_set_new(scope, "missionId", json_string(repo->scope.mission_id));
  if (*repo->scope.idea_id) json_object_set_new(scope, "ideaId", json_string(repo->scope.idea_id));
  if (*repo->scope.work_id) json_object_set_new(scope, "workId", json_string(repo->scope.work_id));
  return scope;
}

/* Records move in the call's transaction, pending or (applied) already on its branch. */
static int record(tg_call_ctx *cx, tg_scope_repo *repo, tg_repo_move *move, bool applied) {
  char now[TG_ISO_LEN + 1];
  if (tg_uuid7(move->id) < 0) return TG_E_IO;
  tg_now_iso(now);
  return tg_db_exec(cx->db,
                    "INSERT INTO repo_ref_moves (id, repo_id, branch, old_sha, new_sha,"
                    " principal_id, run_id, tool, created_at, applied_at, seq)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
                    " (SELECT COALESCE(MAX(seq), 0) + 1 FROM repo_ref_moves WHERE repo_id = $2))",
                    json_pack("[ssss?sss?sss?]", move->id, repo->id, move->branch,
                              *move->old_sha ? move->old_sha : NULL, move->new_sha,
                              cx->principal->id, cx->run_id, cx->tool->name, now,
                              applied ? now : NULL),
                    NULL);
}

int tg_repo_record(tg_call_ctx *cx, tg_scope_repo *repo, tg_repo_move *move) {
  return record(cx, repo, move, false);
}

/* Takes back, on db (in a write transaction), what the call of a move given up wrote (its
 * take_back column, as text; NULL: nothing): its undo statement, and the activity rows that
 * told of the commit. What the database refuses while the transaction stands (a statement a
 * later schema no longer takes, a constraint), or text that does not read, is logged and
 * passed over, so that it cannot stop every later use of the repository from finishing its
 * moves; a failure that ended the transaction (a full disk) is not. */
static int take_back(tg_db *db, const char *move_id, const char *text) {
  if (!text) return TG_OK;
  json_error_t error;
  _cleanup_json_ json_t *what = json_loads(text, 0, &error);
  if (!what && json_error_code(&error) == json_error_out_of_memory) return TG_E_NOMEM;
  const char *undo = tg_json_str(what, "undo");
  int r = !what ? TG_E_INVAL
          : undo ? tg_db_exec(db, undo, json_incref(json_object_get(what, "params")), NULL)
                 : TG_OK;
  if (r < 0 && r != TG_E_NOMEM && tg_db_writing(db)) {
    tg_log(TG_LOG_WARN, "repo: the undo of given-up move %s failed, passed over: %s", move_id,
           what ? tg_db_errmsg(db) : error.text);
    r = TG_OK;
  }
  size_t i;
  json_t *id;
  json_array_foreach(json_object_get(what, "activity"), i, id) {
    if (r < 0) break;
    r = tg_db_exec(db, "DELETE FROM activity_log WHERE id = $1", json_pack("[O]", id), NULL);
  }
  return r;
}

/* Marks move id applied, or abandoned with its take_back (see take_back), on db, unless it
 * is marked already: the first decision stands, and what it takes back is taken once.
 * *marked (may be NULL): whether this marked it. */
static int mark_move(tg_db *db, const char *id, bool applied, const char *take_back_text,
                     bool *marked_now) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int64_t marked = 0;
  int r = tg_db_exec(db,
                     applied ? "UPDATE repo_ref_moves SET applied_at = $2 WHERE id = $1"
                               " AND applied_at IS NULL AND abandoned_at IS NULL"
                             : "UPDATE repo_ref_moves SET abandoned_at = $2 WHERE id = $1"
                               " AND applied_at IS NULL AND abandoned_at IS NULL",
                     json_pack("[ss]", id, now), &marked);
  if (marked_now) *marked_now = marked > 0;
  return r == TG_OK && marked && !applied ? take_back(db, id, take_back_text) : r;
}

/* A recorded move waiting for its call's transaction to commit. */
typedef struct publish_step {
  tg_git *git; /* taken over from the handler's tg_scope_repo */
  tg_repo_move move;
  char repo_id[TG_UUID_LEN + 1];
  char label[96];
  char *take_back; /* as recorded with the move (NULL: nothing) */
  bool given_up;   /* made by the call, yet given up first by another use (see conclude) */
} publish_step;

static void publish_step_free(void *arg) {
  publish_step *p = arg;
  tg_git_close(p->git);
  free(p->take_back);
  free(p);
}

/* How long a call waits for its branch's lock file to make its move: a lock held longer was
 * left by a writer that crashed. It waits outside any transaction: under the database's write
 * lock, which every writer waits for, a locked branch is never waited for. */
#define OWN_MOVE_WAIT_MS 1000
#define LOCK_RETRY_MS 20

/* Finishes the recorded moves of repository repo_id (label) that are neither applied nor
 * abandoned, read on read_db and marked on mark_db, in the order recorded: one whose branch
 * holds its new commit (at its tip or under later ones) is marked applied; one whose branch
 * still holds its old value is made; one whose branch went elsewhere is marked abandoned
 * (that writer's value stands). Moves of calls of one shared transaction build on each other
 * (tg_repo_tip), so each is made after those before it. A branch locked by another git writer
 * leaves its moves recorded, those of other branches still finished; the answer is
 * TG_E_LOCKED when that branch is own_branch (NULL: none is waited for). It runs under the
 * database's write lock, so that one use of the repository at a time makes or gives up a
 * move, and never waits there. The branch is read before asking whether it holds the
 * commit: the move's own call may make it in between, and a branch only moves forward past a
 * move once made. */
static int finish_moves(tg_db *read_db, tg_db *mark_db, tg_git *git, const char *repo_id,
                        const char *label, const char *own_branch) {
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(read_db,
                      "SELECT id, branch, old_sha, new_sha, take_back FROM repo_ref_moves"
                      " WHERE repo_id = $1"
                      " AND applied_at IS NULL AND abandoned_at IS NULL ORDER BY seq",
                      json_pack("[s]", repo_id), &rows);
  _cleanup_json_ json_t *locked = json_object(); /* branches met locked, as keys */
  if (!locked) return TG_E_NOMEM;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    if (r < 0) break;
    const char *id = tg_json_str(row, "id"), *branch = tg_json_str(row, "branch");
    if (json_object_get(locked, branch)) continue; /* its later moves build on this one */
    const char *old_sha = tg_json_str(row, "old_sha"), *new_sha = tg_json_str(row, "new_sha");
    char tip[TG_GIT_SHA_LEN + 1] = "";
    if ((r = tg_git_tip(git, branch, tip)) == TG_E_NOTFOUND) r = TG_OK;
    bool applied = false;
    if (r == TG_OK) r = tg_git_contains(git, branch, new_sha, &applied);
    if (r == TG_OK && !applied && strcmp(tip, old_sha ? old_sha : "") == 0) {
      r = tg_git_move(git, branch, old_sha, new_sha, "toolgate: finish a recorded move", 0);
      if (r == TG_E_LOCKED) {
        r = json_object_set_new(locked, branch, json_true()) < 0 ? TG_E_NOMEM : TG_OK;
        continue;
      }
      applied = r == TG_OK;
      if (r == TG_E_CONSTRAINT) r = tg_git_contains(git, branch, new_sha, &applied);
    }
    if (r == TG_OK) r = mark_move(mark_db, id, applied, tg_json_str(row, "take_back"), NULL);
  }
  if (r < 0) tg_log(TG_LOG_WARN, "repo %s: the recorded moves could not be finished", label);
  return r == TG_OK && own_branch && json_object_get(locked, own_branch) ? TG_E_LOCKED : r;
}

/* After the call's commit, in a transaction of its own (which waits its turn behind other
 * writers instead of racing them): when *applied is false, first finishes the recorded moves
 * (finish) and asks the branch again, for under the write lock no other use of the
 * repository makes a recorded move; then marks the move applied, or abandoned with what it
 * takes back (what the call's rows told of never happened). TG_E_LOCKED, nothing decided:
 * finishing met a locked branch. */
static int conclude(tg_call_ctx *cx, publish_step *p, bool finish, bool *applied) {
  const tg_repo_move *move = &p->move;
  int r = tg_db_begin(cx->db);
  if (r == TG_OK && !*applied && finish)
    r = finish_moves(cx->db, cx->db, p->git, p->repo_id, p->label, move->branch);
  if ((r == TG_OK || r == TG_E_LOCKED) && !*applied) {
    int asked = tg_git_contains(p->git, move->branch, move->new_sha, applied);
    /* A lock met past this move leaves it decided all the same. */
    r = asked < 0 ? asked : r == TG_E_LOCKED && !*applied ? TG_E_LOCKED : TG_OK;
  }
  bool marked = false;
  if (r == TG_OK) r = mark_move(cx->db, move->id, *applied, p->take_back, &marked);
  /* Made, but not marked so: another use of the repository found the branch elsewhere and
   * gave the move up (taking back what the call wrote) before the branch came back to the
   * value this call's compare-and-swap expected. The give-up stands. */
  _cleanup_json_ json_t *row = NULL;
  if (r == TG_OK && *applied && !marked)
    r = tg_db_query_row(cx->db, "SELECT id FROM repo_ref_moves WHERE id = $1"
                        " AND abandoned_at IS NOT NULL", json_pack("[s]", move->id), &row);
  p->given_up = row != NULL;
  if (r == TG_OK) r = tg_db_commit(cx->db);
  if (r < 0) tg_db_rollback(cx->db);
  return r;
}

/* The failure of a call whose move was abandoned as its branch went (why). */
static int unpublished(tg_call_ctx *cx, const publish_step *p, const char *reason,
                       const char *why) {
  const tg_repo_move *move = &p->move;
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                 json_pack("{s:s,s:s,s:s,s:s}", "reason", reason, "repo", p->label, "branch",
                           move->branch, "sha", move->new_sha),
                 "Branch %s of %s %s; commit %.12s was not published. Retry.", move->branch,
                 p->label, why, move->new_sha);
}

static int moved_elsewhere(tg_call_ctx *cx, const publish_step *p) {
  return unpublished(cx, p, "concurrent_write", "was moved by another writer while this call ran");
}

static int publish_after_commit(tg_call_ctx *cx, void *arg) {
  publish_step *p = arg;
  const tg_repo_move *move = &p->move;
  char why[160];
  snprintf(why, sizeof why, "toolgate: %s", cx->tool->name);
  int moved = tg_git_move(p->git, move->branch, *move->old_sha ? move->old_sha : NULL,
                          move->new_sha, why, OWN_MOVE_WAIT_MS);
  bool applied = moved == TG_OK;
  /* Not made: the branch is behind (moves recorded before this one, which it builds on, not
   * made yet), ahead (another use of the repository made this one first), elsewhere or
   * locked; conclude finishes what is recorded and decides. A lock it meets is waited for
   * here, outside the transaction, as long as the call's own move would have. */
  int r = conclude(cx, p, moved == TG_E_CONSTRAINT, &applied);
  for (int waited = 0; r == TG_E_LOCKED && waited < OWN_MOVE_WAIT_MS; waited += LOCK_RETRY_MS) {
    nanosleep(&(struct timespec){0, LOCK_RETRY_MS * 1000000L}, NULL);
    r = conclude(cx, p, true, &applied);
  }
  if (r == TG_E_LOCKED) {
    moved = r;
    r = conclude(cx, p, false, &applied);
  }
  if (r == TG_OK && p->given_up) {
    /* Its branch holds a commit whose move was given up: moved back (a branch the call
     * created, deleted), unless moved on. */
    int back = *move->old_sha ? tg_git_move(p->git, move->branch, move->new_sha, move->old_sha,
                                            "toolgate: take back a move given up", 0)
                              : tg_git_remove(p->git, move->branch, move->new_sha, 0);
    if (back < 0)
      tg_log(TG_LOG_ERROR, "repo %s: branch %s holds commit %.12s, whose move was given up, "
             "and could not be moved back", p->label, move->branch, move->new_sha);
    return moved_elsewhere(cx, p);
  }
  if (r < 0 && applied) {
    /* The branch holds the move either way: a mark that fails is made by the next use. */
    tg_log(TG_LOG_WARN, "repo %s: move %s applied but not marked: %s", p->label, move->id,
           tg_db_errmsg(cx->db));
    return TG_OK;
  }
  if (r < 0)
    return tg_fail(cx, TG_ERR_INTERNAL_ERROR,
                   json_pack("{s:s,s:s,s:s,s:s}", "reason", "outcome_unknown", "repo", p->label,
                             "branch", move->branch, "sha", move->new_sha),
                   "Commit %.12s is recorded for branch %s of %s, but it could neither be "
                   "published nor given up now: the next use of the repository publishes it if "
                   "the branch has not moved. Look at the branch before retrying.",
                   move->new_sha, move->branch, p->label);
  if (applied) return TG_OK;
  if (moved == TG_E_LOCKED)
    return unpublished(cx, p, "branch_locked",
                       "stayed locked by another git writer (or by a lock file one left as it "
                       "crashed)");
  if (moved != TG_E_CONSTRAINT) return moved;
  /* Built on another call's commit (tg_repo_tip), which was given up: no other writer. */
  _cleanup_json_ json_t *base = NULL;
  if (*move->old_sha)
    r = tg_db_query_row(cx->db,
                        "SELECT id FROM repo_ref_moves WHERE repo_id = $1 AND branch = $2"
                        " AND new_sha = $3 AND abandoned_at IS NOT NULL",
                        json_pack("[sss]", p->repo_id, move->branch, move->old_sha), &base);
  if (r == TG_OK && base)
    return unpublished(cx, p, "base_abandoned",
                       "did not take the commit this one was built on (another call's, "
                       "itself not published)");
  return moved_elsewhere(cx, p);
}

int tg_repo_publish(tg_call_ctx *cx, tg_scope_repo *repo, const tg_repo_move *move,
                    const char *undo_sql, json_t *undo_params) {
  /* Recorded with the move, for whichever use of the repository gives it up. */
  json_t *activity = tg_activity_ids(cx);
  _cleanup_json_ json_t *what = activity ? json_pack("{s:s?,s:o?,s:o}", "undo", undo_sql,
                                                     "params", undo_params, "activity", activity)
                                         : NULL;
  if (!activity) json_decref(undo_params);
  publish_step *p = calloc(1, sizeof *p);
  if (!what || !p || !(p->take_back = json_dumps(what, JSON_COMPACT))) {
    free(p);
    return TG_E_NOMEM;
  }
  int r = tg_db_exec(cx->db, "UPDATE repo_ref_moves SET take_back = $2 WHERE id = $1",
                     json_pack("[ss]", move->id, p->take_back), NULL);
  if (r < 0) {
    publish_step_free(p);
    return r;
  }
  p->git = TAKE_PTR(repo->git);
  p->move = *move;
  snprintf(p->repo_id, sizeof p->repo_id, "%s", repo->id);
  snprintf(p->label, sizeof p->label, "%s", repo->label);
  return tg_call_after(cx, publish_after_commit, p, publish_step_free);
}

/* The moves a process recorded but did not live to make, finished as the repository is
 * taken (finish_moves), in the handler's transaction, under the write lock. They are read
 * on the call's own connection, which sees committed rows only: a move another call recorded
 * in a transaction shared with this one (tg_db_batch) may still roll back. */
static int settle(tg_call_ctx *cx, tg_scope_repo *repo) {
  /* A locked branch leaves the moves to their own calls, which wait for it. */
  return finish_moves(cx->env->db, cx->db, repo->git, repo->id, repo->label, NULL);
}

/* What settling a repository decided, made lasting when the call that settled it fails: its
 * rollback would take the decisions back, though its answer may have told of them (a pull
 * request given up is not open), and a later use could then decide otherwise. */
typedef struct settled {
  char repo_id[TG_UUID_LEN + 1];
  char label[96];
  char default_branch[TG_GIT_BRANCH_MAX + 1];
  char *path;
} settled;

static void settled_free(void *arg) {
  settled *s = arg;
  free(s->path);
  free(s);
}

static int settle_after_failure(tg_call_ctx *cx, void *arg) {
  const settled *s = arg;
  tg_db *db = cx->env->db;
  tg_git *git = NULL;
  int r = tg_git_open(s->path, s->default_branch, &git);
  if (r == TG_OK) r = tg_db_begin(db);
  if (r == TG_OK) r = finish_moves(db, db, git, s->repo_id, s->label, NULL);
  if (r == TG_OK) r = tg_db_commit(db);
  if (r < 0) tg_db_rollback(db);
  tg_git_close(git);
  return r;
}

/* path (stolen): the repository's folder. */
static int keep_settled(tg_call_ctx *cx, const tg_scope_repo *repo, char *path) {
  settled *s = calloc(1, sizeof *s);
  if (!s) {
    free(path);
    return TG_E_NOMEM;
  }
  s->path = path;
  snprintf(s->repo_id, sizeof s->repo_id, "%s", repo->id);
  snprintf(s->label, sizeof s->label, "%s", repo->label);
  snprintf(s->default_branch, sizeof s->default_branch, "%s", repo->default_branch);
  return tg_call_on_failure(cx, settle_after_failure, s, settled_free);
}

int tg_repo_tip(tg_call_ctx *cx, tg_scope_repo *repo, const char *branch,
                char sha[TG_GIT_SHA_LEN + 1]) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT new_sha FROM repo_ref_moves WHERE repo_id = $1 AND branch = $2"
                          " AND applied_at IS NULL AND abandoned_at IS NULL ORDER BY seq DESC LIMIT 1",
                          json_pack("[ss]", repo->id, branch), &row);
  if (r < 0) return r;
  if (!row) return tg_git_tip(repo->git, branch, sha);
  snprintf(sha, TG_GIT_SHA_LEN + 1, "%s", tg_json_str(row, "new_sha"));
  return TG_OK;
}

/* A new repository's first commit, whose move its call made before its transaction. */
typedef struct initial {
  char *path; /* the folder */
  char tenant_id[TG_UUID_LEN + 1], rel_path[sizeof ((tg_scope_repo *)0)->rel_path];
  char branch[TG_GIT_BRANCH_MAX + 1], sha[TG_GIT_SHA_LEN + 1];
} initial;

static void initial_free(void *arg) {
  initial *i = arg;
  free(i->path);
  free(i);
}

/* After the call failed: its first commit is taken off the branch, unless a use since has
 * adopted it (its repository row stands). In a write transaction, so that no use is adopting
 * it meanwhile (and so without waiting for a lock file); the repository's folder and objects
 * stay, unreferenced. */
static int take_back_initial(tg_call_ctx *cx, void *arg) {
  const initial *i = arg;
  tg_db *db = cx->env->db;
  _cleanup_json_ json_t *row = NULL;
  tg_git *git = NULL;
  int r = tg_db_begin(db);
  if (r < 0) return r;
  r = tg_db_query_row(db, "SELECT id FROM repos WHERE tenant_id = $1 AND path = $2",
                      json_pack("[ss]", i->tenant_id, i->rel_path), &row);
  if (r == TG_OK && !row) r = tg_git_open(i->path, i->branch, &git);
  if (r == TG_OK && !row) r = tg_git_remove(git, i->branch, i->sha, 0);
  /* Another writer's value stands: no failure of this step. */
  if (r == TG_E_CONSTRAINT) {
    tg_log(TG_LOG_INFO, "repo: branch %s of %s moved on from (or left) the first commit a "
                        "failed call made; left as it is", i->branch, i->path);
    r = TG_OK;
  }
  tg_db_rollback(db);
  tg_git_close(git);
  return r;
}

/* The first commit of a new repository, so that branches can start from the default one.
 * path (stolen): the repository's folder. */
static int initialize(tg_call_ctx *cx, tg_scope_repo *repo, const char *tenant_id, char *path) {
  _cleanup_free_ char *owned_path = path;
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int r = tg_db_exec(cx->db,
                     "INSERT INTO repos (id, tenant_id, scope_type, scope_id, name, path,"
                     " default_branch, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                     json_pack("[ssssssss]", repo->id, tenant_id, repo->kind, repo->owner_id,
                               repo->name, repo->rel_path, repo->default_branch, now),
                     NULL);
  if (r < 0) return r;
  tg_repo_move move = {0};
  snprintf(move.branch, sizeof move.branch, "%s", repo->default_branch);
  r = tg_git_tip(repo->git, repo->default_branch, move.new_sha);
  if (r == TG_OK) return record(cx, repo, &move, true); /* adopt a folder left from before */
  if (r != TG_E_NOTFOUND) return r;
  char message[160];
  snprintf(message, sizeof message, "Initialize %s\n", repo->label);
  tg_git_problem problem;
  r = tg_git_commit(repo->git, NULL, NULL, 0, "toolgate", "toolgate@toolgate.invalid", message,
                    move.new_sha, &problem);
  if (r == TG_OK) r = record(cx, repo, &move, true);
  /* The one move made before the commit, so that the call can build on the branch: a call
   * that then fails takes it back; after a crash, the next use adopts the branch as above. */
  if (r == TG_OK)
    r = tg_git_move(repo->git, move.branch, NULL, move.new_sha, "toolgate: initialize", 0);
  if (r < 0) return r;
  initial *i = calloc(1, sizeof *i);
  if (!i) return TG_E_NOMEM;
  i->path = TAKE_PTR(owned_path);
  snprintf(i->tenant_id, sizeof i->tenant_id, "%s", tenant_id);
  snprintf(i->rel_path, sizeof i->rel_path, "%s", repo->rel_path);
  snprintf(i->branch, sizeof i->branch, "%s", move.branch);
  snprintf(i->sha, sizeof i->sha, "%s", move.new_sha);
  return tg_call_on_failure(cx, take_back_initial, i, initial_free);
}

int tg_repo_acquire(tg_call_ctx *cx, const char *kind, const char *owner_id, const char *name,
                    tg_scope_repo *ret) {
  *ret = (tg_scope_repo){0};
  bool mission = strcmp(kind, "mission") == 0;
  ret->kind = mission ? "mission" : "work";
  ret->name = strcmp(name, "mission") == 0 ? "mission" : strcmp(name, "data") == 0 ? "data" : "website";
  snprintf(ret->owner_id, sizeof ret->owner_id, "%s", owner_id);
  const char *tenant_id = cx->principal->tenant_id;
  _cleanup_json_ json_t *owner = NULL, *row = NULL;
  int r = tg_db_query_row(cx->db,
                          mission ? "SELECT o.slug, t.slug AS tenant FROM missions o JOIN tenants t"
                                    " ON t.id = o.tenant_id WHERE o.id = $1 AND o.tenant_id = $2"
                                  : "SELECT o.slug, t.slug AS tenant FROM works o JOIN tenants t"
                                    " ON t.id = o.tenant_id WHERE o.id = $1 AND o.tenant_id = $2",
                          json_pack("[ss]", owner_id, tenant_id), &owner);
  if (r < 0) return r;
  if (!owner) return TG_E_NOTFOUND;
  const char *slug = json_string_value(json_object_get(owner, "slug"));
  const char *tenant = json_string_value(json_object_get(owner, "tenant"));
  if (!slug_ok(slug) || !slug_ok(tenant)) return TG_E_INVAL;
  snprintf(ret->label, sizeof ret->label, "%s:%s/%s", ret->kind, slug, ret->name);
  snprintf(mission ? ret->scope.mission_id : ret->scope.work_id, TG_UUID_LEN + 1, "%s", owner_id);
  r = tg_scope_resolve(cx->db, tenant_id, &ret->scope);
  if (r < 0) return r;

  r = tg_db_query_row(cx->db,
                      "SELECT id, path, default_branch FROM repos"
                      " WHERE tenant_id = $1 AND scope_id = $2 AND name = $3",
                      json_pack("[sss]", tenant_id, owner_id, ret->name), &row);
  if (r < 0) return r;
  if (row) {
    snprintf(ret->id, sizeof ret->id, "%s", json_string_value(json_object_get(row, "id")));
    snprintf(ret->rel_path, sizeof ret->rel_path, "%s", json_string_value(json_object_get(row, "path")));
    snprintf(ret->default_branch, sizeof ret->default_branch, "%s",
             json_string_value(json_object_get(row, "default_branch")));
  } else {
    if (tg_uuid7(ret->id) < 0) return TG_E_IO;
    snprintf(ret->rel_path, sizeof ret->rel_path, "repos/%s/%ss/%s/%s.git", tenant, ret->kind,
             slug, ret->name);
    snprintf(ret->default_branch, sizeof ret->default_branch, "main");
  }
  char *abs = NULL;
  if (asprintf(&abs, "%s/%s", cx->env->data_dir ? cx->env->data_dir : ".", ret->rel_path) < 0)
    return TG_E_NOMEM;
  r = tg_git_open(abs, ret->default_branch, &ret->git);
  if (r == TG_OK && !row) r = initialize(cx, ret, tenant_id, TAKE_PTR(abs));
  if (r == TG_OK && row) r = settle(cx, ret);
  if (r == TG_OK && row) r = keep_settled(cx, ret, TAKE_PTR(abs));
  free(abs);
  /* Settling may have given up the calling agent's own creation (archived): decided again. */
  return r == TG_OK && row ? tg_call_recheck(cx) : r;
}

void tg_repo_release(tg_scope_repo *repo) {
  tg_git_close(repo->git);
  repo->git = NULL;
}

static const char *problem_message(const char *reason) {
  if (strcmp(reason, "exists") == 0) return "an add of a path that already exists (use modify)";
  if (strcmp(reason, "missing") == 0) return "a modify or delete of a path that does not exist";
  if (strcmp(reason, "symlink") == 0) return "the path is or passes through a symbolic link";
  if (strcmp(reason, "under_a_file") == 0) return "a folder on the path is a file";
  if (strcmp(reason, "duplicate") == 0) return "the path is changed twice, or inside another changed path";
  return "the path is a folder or a submodule";
}

/* The branch that keeps a branch called name from being made in repo, into taken: one that
 * is, or whose name clashes with it (tg_git_names_clash), in git or to be made by a move
 * recorded and not made yet (another call's of the shared transaction); TG_E_NOTFOUND when
 * there is none. */
static int branch_taken(tg_call_ctx *cx, const tg_scope_repo *repo, const char *name,
                        char taken[TG_GIT_BRANCH_MAX + 1]) {
  _cleanup_json_ json_t *branches = NULL, *pending = NULL;
  bool more;
  int r = tg_git_branches(repo->git, SIZE_MAX, &branches, &more);
  if (r == TG_OK)
    r = tg_db_query(cx->db,
                    "SELECT DISTINCT branch FROM repo_ref_moves WHERE repo_id = $1"
                    " AND applied_at IS NULL AND abandoned_at IS NULL",
                    json_pack("[s]", repo->id), &pending);
  if (r < 0) return r;
  size_t i;
  json_t *row;
  json_array_foreach(pending, i, row) json_array_append(branches, json_object_get(row, "branch"));
  json_array_foreach(branches, i, row) {
    const char *other = json_string_value(row);
    if (other && (strcmp(other, name) == 0 || tg_git_names_clash(other, name))) {
      snprintf(taken, TG_GIT_BRANCH_MAX + 1, "%s", other);
      return TG_OK;
    }
  }
  return TG_E_NOTFOUND;
}

/* TG_OK when a branch called name may be made in repo, else its refusal. */
static int new_branch_free(tg_call_ctx *cx, const tg_scope_repo *repo, const char *name) {
  char taken[TG_GIT_BRANCH_MAX + 1];
  int r = branch_taken(cx, repo, name, taken);
  if (r == TG_E_NOTFOUND) return TG_OK;
  if (r < 0) return r;
  if (strcmp(taken, name) == 0)
    return tg_fail(
        cx, TG_ERR_PRECONDITION_FAILED,
        json_pack("{s:s,s:s,s:s}", "reason", "branch_exists", "repo", repo->label, "branch", name),
        "Branch %s already exists in %s.", name, repo->label);
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                 json_pack("{s:s,s:s,s:s,s:s}", "reason", "branch_clash", "repo", repo->label,
                           "branch", name, "clashesWith", taken),
                 "Branch %s cannot be made in %s beside branch %s: one name would be a folder "
                 "of the other.",
                 name, repo->label, taken);
}

int tg_repo_prepare(tg_call_ctx *cx, tg_scope_repo *repo, const char *branch, bool create,
                    const tg_git_change *changes, size_t n, const char *message,
                    tg_repo_move *move) {
  *move = (tg_repo_move){0};
  const char *base = create ? repo->default_branch : branch;
  char parent[TG_GIT_SHA_LEN + 1];
  /* A new branch starts from its base as published: it is no move of the base. */
  int r = create ? tg_git_tip(repo->git, base, parent) : tg_repo_tip(cx, repo, base, parent);
  if (r == TG_E_NOTFOUND)
    return tg_fail(cx, TG_ERR_NOT_FOUND,
                   json_pack("{s:s,s:s}", "repo", repo->label, "branch", base),
                   "No branch %s in %s.", base, repo->label);
  if (r < 0) return r;
  snprintf(move->branch, sizeof move->branch, "%s", branch);
  if (create) {
    r = new_branch_free(cx, repo, branch);
    if (r < 0) return r;
    *move->old_sha = '\0';
  } else {
    memcpy(move->old_sha, parent, sizeof parent);
  }
  _cleanup_free_ char *text = full_message(cx, message);
  if (!text) return TG_E_NOMEM;
  char name[80], email[120];
  identity(cx, name, sizeof name, email, sizeof email);
  tg_git_problem problem = {0};
  r = tg_git_commit(repo->git, parent, changes, n, name, email, text, move->new_sha, &problem);
  if (r == TG_E_INVAL && strcmp(problem.reason, "no_change") == 0)
    return tg_fail(
        cx, TG_ERR_PRECONDITION_FAILED,
        json_pack("{s:s,s:s,s:s}", "reason", "no_change", "repo", repo->label, "branch", base),
        "The files are already so on %s of %s: there is nothing to commit.", base, repo->label);
  if (r == TG_E_INVAL)
    return tg_fail(
        cx, TG_ERR_VALIDATION_FAILED,
        json_pack("{s:s,s:I,s:s,s:s}", "reason", problem.reason, "index", (json_int_t)problem.index,
                  "path", changes[problem.index].path, "repo", repo->label),
        "File %zu (%.*s): %s.", problem.index, TG_UTF8_CUT(changes[problem.index].path, 200),
        problem_message(problem.reason));
  if (r < 0) return r;
  return tg_repo_record(cx, repo, move);
}

/* Where a commit of the caller goes: the repository and the folder its paths must stay in. */
typedef struct target {
  const char *kind, *name;
  char owner_id[TG_UUID_LEN + 1];
  char prefix[64]; /* "" or ".works/ideas/<idea id>" */
} target;

static int resolve_target(tg_call_ctx *cx, json_t *args, target *t) {
  const tg_principal *p = cx->principal;
  *t = (target){0};
  tg_scope_ref own;
  int r = tg_scope_of(cx->db, p, &own);
  if (r < 0) return r;
  const char *repo = tg_json_str(args, "targetRepo");
  if (!repo) repo = strcmp(p->scope_type, "work") == 0 ? "data" : "mission";
  t->name = repo;
  t->kind = strcmp(repo, "mission") == 0 ? "mission" : "work";
  const char *given = tg_json_str(args, "targetId");
  if (given) {
    r = tg_lookup_scope_id(cx, t->kind, given,
                           json_pack("{s:s,s:s}", "kind", t->kind, "targetId", given),
                           t->owner_id);
    if (r < 0) return r;
  } else {
    const char *own_id = strcmp(t->kind, "mission") == 0 ? own.mission_id : own.work_id;
    if (!*own_id)
      return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                     json_pack("{s:s,s:s}", "reason", "target_needed", "targetRepo", repo),
                     "The caller has no %s of its own: name one with targetId.", t->kind);
    snprintf(t->owner_id, sizeof t->owner_id, "%s", own_id);
  }
  tg_scope_ref ref = {0};
  snprintf(strcmp(t->kind, "mission") == 0 ? ref.mission_id : ref.work_id, TG_UUID_LEN + 1, "%s",
           t->owner_id);
  r = tg_scope_resolve(cx->db, p->tenant_id, &ref);
  if (r < 0) return r;
  /* A mission agent reaches its mission's repository; an idea agent reaches only its idea's
   * folder in it, since the idea is all of the mission it is scoped to. */
  bool idea_in_mission = p->scope_id && strcmp(p->scope_type, "idea") == 0 &&
                         strcmp(t->kind, "mission") == 0 && strcmp(own.mission_id, t->owner_id) == 0;
  if (!idea_in_mission && !tg_scope_reaches(p, &ref))
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                   json_pack("{s:s,s:s,s:s}", "reason", "out_of_scope", "targetRepo", repo,
                             "scope", p->scope_type),
                   "The %s repository of that %s is outside the caller's scope.", repo, t->kind);
  if (idea_in_mission) snprintf(t->prefix, sizeof t->prefix, ".works/ideas/%s", p->scope_id);
  return TG_OK;
}

/* The files argument as changes, every path validated. changes borrow from args. */
static int build_changes(tg_call_ctx *cx, json_t *files, const char *prefix,
                         tg_git_change **ret, size_t *ret_n) {
  size_t n = json_array_size(files), total = 0;
  tg_git_change *changes = calloc(n ? n : 1, sizeof *changes);
  if (!changes) return TG_E_NOMEM;
  for (size_t i = 0; i < n; i++) {
    json_t *f = json_array_get(files, i), *path = json_object_get(f, "path");
    json_t *content = json_object_get(f, "content");
    const char *mode = tg_json_str(f, "mode");
    const char *p = json_string_value(path);
    size_t len = json_string_length(path);
    const char *why = tg_repo_path_check(p, len);
    int r = TG_OK;
    if (why)
      r = tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                  json_pack("{s:s,s:I,s:s}", "reason", "bad_path", "index", (json_int_t)i, "why", why),
                  "File %zu: the path is not acceptable: %s.", i, why);
    else if (tg_repo_path_reserved(p))
      r = tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                  json_pack("{s:s,s:I,s:s}", "reason", "agent_files", "index", (json_int_t)i, "path", p),
                  "File %zu (%s): agent files, and the folders holding them, change only "
                  "through editAgentFile.",
                  i, p);
    else if (!tg_repo_path_under(p, prefix))
      r = tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                  json_pack("{s:s,s:I,s:s,s:s}", "reason", "outside_scope_tree", "index",
                            (json_int_t)i, "path", p, "allowed", prefix),
                  "File %zu (%s) is outside the caller's scope tree %s/.", i, p, prefix);
    if (r == TG_OK && strcmp(mode, "delete") != 0) {
      char field[48];
      snprintf(field, sizeof field, "files[%zu].content", i);
      r = tg_refuse_secret(cx, field, json_string_value(content), json_string_length(content));
    }
    if (r < 0) {
      free(changes);
      return r;
    }
    changes[i] = (tg_git_change){
        .path = p,
        .content = json_string_value(content) ? json_string_value(content) : "",
        .len = json_string_length(content),
        .mode = strcmp(mode, "add") == 0 ? TG_GIT_ADD : strcmp(mode, "modify") == 0 ? TG_GIT_MODIFY
                                                                                  : TG_GIT_DELETE};
    total += changes[i].len;
  }
  if (total > TOTAL_BYTES_MAX) {
    free(changes);
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:I,s:I}", "reason", "too_large", "bytes", (json_int_t)total,
                             "maxBytes", (json_int_t)TOTAL_BYTES_MAX),
                   "The files hold %zu bytes; one call may write at most %u.", total,
                   TOTAL_BYTES_MAX);
  }
  *ret = changes;
  *ret_n = n;
  return TG_OK;
}

static json_t *file_list(const tg_git_change *changes, size_t n) {
  static const char *const modes[] = {"add", "modify", "delete"};
  json_t *list = json_array();
  for (size_t i = 0; list && i < n; i++)
    json_array_append_new(list, json_pack("{s:s,s:s}", "path", changes[i].path, "mode",
                                          modes[changes[i].mode]));
  return list;
}

static int bad_branch(tg_call_ctx *cx, const char *branch) {
  return tg_fail(cx, TG_ERR_VALIDATION_FAILED, json_pack("{s:s}", "reason", "bad_branch"),
                 "The branch name is not acceptable: use ASCII letters, digits and ._-/ as git "
                 "allows, at most %d bytes.",
                 TG_GIT_BRANCH_MAX);
}

static int commit_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  target t;
  int r = resolve_target(cx, args, &t);
  if (r < 0) return r;
  _cleanup_free_ tg_git_change *changes = NULL;
  size_t n;
  r = build_changes(cx, json_object_get(args, "files"), t.prefix, &changes, &n);
  if (r < 0) return r;
  const char *message = tg_json_str(args, "commitMessage");
  r = tg_refuse_secret(cx, "commitMessage", message, strlen(message));
  if (r < 0) return r;
  const char *branch = tg_json_str(args, "branch");
  r = branch ? tg_git_branch_check(branch) : TG_OK;
  if (r == TG_E_INVAL) return bad_branch(cx, branch);
  if (r < 0) return r;
  _cleanup_repo_ tg_scope_repo repo = {0};
  r = tg_repo_acquire(cx, t.kind, t.owner_id, t.name, &repo);
  if (r < 0) return r;
  if (!branch) branch = repo.default_branch;
  tg_repo_move move;
  r = tg_repo_prepare(cx, &repo, branch, false, changes, n, message, &move);
  if (r < 0) return r;
  char summary[320];
  snprintf(summary, sizeof summary, "Committed %zu file(s) to %s on %s", n, repo.label, branch);
  _cleanup_json_ json_t *scope = tg_repo_activity_scope(&repo);
  r = tg_activity(cx, "AGENT_COMMITTED_TO_REPO", scope, summary,
                  json_pack("{s:s,s:s,s:s,s:s?,s:o}", "repo", repo.label, "branch", branch, "sha",
                            move.new_sha, "parentSha", *move.old_sha ? move.old_sha : NULL,
                            "files", file_list(changes, n)));
  if (r < 0) return r;
  r = tg_repo_publish(cx, &repo, &move, NULL, NULL);
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "sha", move.new_sha, "branch", branch);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static char *pr_url(const tg_call_ctx *cx, const tg_scope_repo *repo, json_int_t number) {
  const char *base = cx->env->public_url ? cx->env->public_url : "";
  size_t len = strlen(base);
  while (len && base[len - 1] == '/') len--;
  size_t rel = strlen(repo->rel_path) - strlen(".git"); /* rel_path ends in .git */
  char *url = NULL;
  if (asprintf(&url, "%.*s/%.*s/pulls/%lld", (int)len, base, (int)rel, repo->rel_path,
               (long long)number) < 0)
    return NULL;
  return url;
}

static int pr_open(tg_call_ctx *cx, json_t *args, json_t **ret) {
  target t;
  int r = resolve_target(cx, args, &t);
  if (r < 0) return r;
  _cleanup_free_ tg_git_change *changes = NULL;
  size_t n;
  r = build_changes(cx, json_object_get(args, "files"), t.prefix, &changes, &n);
  if (r < 0) return r;
  const char *title = tg_json_str(args, "title"), *body = tg_json_str(args, "body");
  r = tg_refuse_secret(cx, "title", title, strlen(title));
  if (r == TG_OK) r = tg_refuse_secret(cx, "body", body, strlen(body));
  if (r < 0) return r;
  const char *branch = tg_json_str(args, "branchName");
  r = tg_git_branch_check(branch);
  if (r == TG_E_INVAL) return bad_branch(cx, branch);
  if (r < 0) return r;
  _cleanup_repo_ tg_scope_repo repo = {0};
  r = tg_repo_acquire(cx, t.kind, t.owner_id, t.name, &repo);
  if (r < 0) return r;
  char base_sha[TG_GIT_SHA_LEN + 1];
  r = tg_git_tip(repo.git, repo.default_branch, base_sha);
  if (r < 0) return r;
  tg_repo_move move;
  r = tg_repo_prepare(cx, &repo, branch, true, changes, n, title, &move);
  if (r < 0) return r;
  _cleanup_json_ json_t *counter = NULL;
  r = tg_db_query_row(cx->db,
                      "UPDATE repos SET last_pr_number = last_pr_number + 1 WHERE id = $1"
                      " RETURNING last_pr_number",
                      json_pack("[s]", repo.id), &counter);
  if (r < 0) return r;
  if (!counter) return TG_E_NOTFOUND;
  json_int_t number = json_integer_value(json_object_get(counter, "last_pr_number"));
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  if (tg_uuid7(id) < 0) return TG_E_IO;
  tg_now_iso(now);
  r = tg_db_exec(cx->db,
                 "INSERT INTO pull_requests (id, repo_id, number, title, body, head_branch,"
                 " base_branch, base_sha, head_sha, author_id, created_at, updated_at)"
                 " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
                 json_pack("[ssIssssssss]", id, repo.id, number, title, body,
                           branch, repo.default_branch, base_sha, move.new_sha, cx->principal->id,
                           now),
                 NULL);
  if (r < 0) return r;
  _cleanup_free_ char *url = pr_url(cx, &repo, number);
  if (!url) return TG_E_NOMEM;
  char summary[400];
  snprintf(summary, sizeof summary, "Opened pull request #%lld in %s: %.*s", (long long)number,
           repo.label, TG_UTF8_CUT(title, 200));
  _cleanup_json_ json_t *scope = tg_repo_activity_scope(&repo);
  r = tg_activity(cx, "AGENT_OPENED_PR", scope, summary,
                  json_pack("{s:s,s:I,s:s,s:s,s:s,s:s,s:o}", "repo", repo.label, "prNumber",
                            number, "prUrl", url, "head", branch, "base", repo.default_branch,
                            "sha", move.new_sha, "files", file_list(changes, n)));
  if (r < 0) return r;
  r = tg_repo_publish(cx, &repo, &move,
                      "UPDATE pull_requests SET state = 'closed', updated_at = $2 WHERE id = $1",
                      json_pack("[ss]", id, now));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:I}", "prUrl", url, "prNumber", number);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* Operators' view: every repository, with a label, in one query. */
static const char repos_sql[] =
    "SELECT r.id, r.scope_type, r.scope_id, r.name, r.path, r.default_branch,"
    " CASE WHEN r.scope_type = 'mission' THEN 'mission:' || m.slug || '/mission'"
    " ELSE 'work:' || w.slug || '/' || r.name END AS label,"
    " (SELECT COUNT(*) FROM pull_requests p WHERE p.repo_id = r.id AND p.state = 'open') AS open"
    " FROM repos r LEFT JOIN missions m ON r.scope_type = 'mission' AND m.id = r.scope_id"
    " LEFT JOIN works w ON r.scope_type = 'work' AND w.id = r.scope_id WHERE r.tenant_id = $1";

static int repository_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *rows = NULL;
  _cleanup_free_ char *sql = NULL;
  if (asprintf(&sql, "%s ORDER BY label LIMIT $2", repos_sql) < 0) return TG_E_NOMEM;
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 50;
  int r = tg_db_query(cx->db, sql, json_pack("[sI]", cx->principal->tenant_id, limit + 1), &rows);
  if (r < 0) return r;
  bool truncated = tg_json_cut(rows, limit);
  json_t *list = json_array();
  if (!list) return TG_E_NOMEM;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    _cleanup_repo_ tg_scope_repo repo = {0};
    r = tg_repo_acquire(cx, json_string_value(json_object_get(row, "scope_type")),
                        json_string_value(json_object_get(row, "scope_id")),
                        json_string_value(json_object_get(row, "name")), &repo);
    json_t *branches = NULL;
    bool more_branches = false;
    char head[TG_GIT_SHA_LEN + 1] = "";
    if (r == TG_OK) r = tg_git_branches(repo.git, BRANCHES_MAX, &branches, &more_branches);
    if (r == TG_OK && tg_git_tip(repo.git, repo.default_branch, head) < 0) *head = '\0';
    _cleanup_free_ char *abs = NULL;
    if (r == TG_OK && asprintf(&abs, "%s/%s", cx->env->data_dir ? cx->env->data_dir : ".",
                               repo.rel_path) < 0)
      r = TG_E_NOMEM;
    if (r < 0) {
      json_decref(branches);
      json_decref(list);
      return r;
    }
    json_t *item = json_pack("{s:O,s:s,s:s,s:o,s:O}", "repo", json_object_get(row, "label"), "path",
                             abs, "defaultBranch", repo.default_branch, "branches", branches,
                             "openPullRequests", json_object_get(row, "open"));
    if (item && *head) json_object_set_new(item, "headSha", json_string(head));
    if (item && more_branches) json_object_set_new(item, "branchesTruncated", json_true());
    if (!item || json_array_append_new(list, item) < 0) {
      json_decref(list);
      return TG_E_NOMEM;
    }
  }
  *ret = json_pack("{s:o,s:b}", "repos", list, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const char prs_sql[] =
    "SELECT * FROM (SELECT p.id, p.number, p.title, p.body, p.state, p.head_branch, p.base_branch,"
    " p.base_sha, p.head_sha, p.merged_sha, p.created_at, r.scope_type, r.scope_id, r.name,"
    " r.tenant_id, CASE WHEN r.scope_type = 'mission' THEN 'mission:' || m.slug || '/mission'"
    " ELSE 'work:' || w.slug || '/' || r.name END AS label,"
    " COALESCE(a.slug, u.username) AS author"
    " FROM pull_requests p JOIN repos r ON r.id = p.repo_id"
    " LEFT JOIN missions m ON r.scope_type = 'mission' AND m.id = r.scope_id"
    " LEFT JOIN works w ON r.scope_type = 'work' AND w.id = r.scope_id"
    " LEFT JOIN agents a ON a.principal_id = p.author_id"
    " LEFT JOIN users u ON u.principal_id = p.author_id) q WHERE q.tenant_id = $1";

static json_t *pr_json(json_t *row) {
  json_t *pr = json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "repo",
                         json_object_get(row, "label"), "number", json_object_get(row, "number"),
                         "title", json_object_get(row, "title"), "body",
                         json_object_get(row, "body"), "state", json_object_get(row, "state"),
                         "head", json_object_get(row, "head_branch"), "base",
                         json_object_get(row, "base_branch"), "author",
                         json_object_get(row, "author"), "createdAt",
                         json_object_get(row, "created_at"));
  if (pr && json_is_string(json_object_get(row, "merged_sha")))
    json_object_set(pr, "mergedSha", json_object_get(row, "merged_sha"));
  return pr;
}

/* TG_OK when the workspace holds the work or mission label names (its repository is made at
 * its first use), else the refusal. */
static int repo_owner_known(tg_call_ctx *cx, const char *label) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT 1 AS known FROM works WHERE tenant_id = $1"
                          " AND $2 IN ('work:' || slug || '/data', 'work:' || slug || '/website')"
                          " UNION ALL SELECT 1 FROM missions WHERE tenant_id = $1"
                          " AND $2 = 'mission:' || slug || '/mission'",
                          json_pack("[ss]", cx->principal->tenant_id, label), &row);
  if (r < 0 || row) return r;
  return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "repo", label),
                 "No repository %s in this workspace: no such work or mission.", label);
}

static int pr_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = json_integer_value(json_object_get(args, "limit"));
  if (!limit) limit = 50;
  _cleanup_free_ char *sql = NULL;
  if (asprintf(&sql,
               "%s AND ($2 IS NULL OR q.label = $2) AND ($3 IS NULL OR q.state = $3)"
               " ORDER BY q.created_at DESC, q.id DESC LIMIT $4",
               prs_sql) < 0)
    return TG_E_NOMEM;
  _cleanup_json_ json_t *rows = NULL;
  int r = tg_db_query(cx->db, sql,
                      json_pack("[ss?s?I]", cx->principal->tenant_id, tg_json_str(args, "repo"),
                                tg_json_str(args, "state"), limit + 1),
                      &rows);
  if (r < 0) return r;
  /* A filter naming no repository is not_found, not an empty list that hides the typo. */
  const char *label = tg_json_str(args, "repo");
  if (label && json_array_size(rows) == 0) {
    r = repo_owner_known(cx, label);
    if (r < 0) return r;
  }
  bool truncated = tg_json_cut(rows, limit);
  json_t *list = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    json_array_append_new(list, pr_json(row));
  }
  *ret = json_pack("{s:o,s:b}", "pullRequests", list, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The pull request args name, with its repository acquired. */
static int find_pr(tg_call_ctx *cx, json_t *args, json_t **ret, tg_scope_repo *repo) {
  _cleanup_free_ char *sql = NULL;
  if (asprintf(&sql, "%s AND q.label = $2 AND q.number = $3", prs_sql) < 0) return TG_E_NOMEM;
  const char *label = tg_json_str(args, "repo");
  json_int_t number = json_integer_value(json_object_get(args, "number"));
  int r = tg_db_query_row(cx->db, sql,
                          json_pack("[ssI]", cx->principal->tenant_id, label, number), ret);
  if (r < 0) return r;
  if (!*ret)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s,s:I}", "repo", label, "number", number),
                   "No pull request #%lld in %s.", (long long)number, label);
  r = tg_repo_acquire(cx, json_string_value(json_object_get(*ret, "scope_type")),
                      json_string_value(json_object_get(*ret, "scope_id")),
                      json_string_value(json_object_get(*ret, "name")), repo);
  if (r < 0) return r;
  /* Read again once the repository is taken: taking it may give up a move a crash left
   * pending, and take back what its call wrote (an opening closed, a merge reopened). */
  json_decref(*ret);
  *ret = NULL;
  r = tg_db_query_row(cx->db, sql, json_pack("[ssI]", cx->principal->tenant_id, label, number),
                      ret);
  return r == TG_OK && !*ret ? TG_E_NOTFOUND : r;
}

static int pr_show(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *row = NULL;
  _cleanup_repo_ tg_scope_repo repo = {0};
  int r = find_pr(cx, args, &row, &repo);
  if (r < 0) return r;
  const char *state = json_string_value(json_object_get(row, "state"));
  char head[TG_GIT_SHA_LEN + 1];
  snprintf(head, sizeof head, "%s", json_string_value(json_object_get(row, "head_sha")));
  /* An open pull request shows its branch as it is now; a deleted branch, what it was. */
  if (strcmp(state, "open") == 0 &&
      tg_git_tip(repo.git, json_string_value(json_object_get(row, "head_branch")), head) < 0)
    snprintf(head, sizeof head, "%s", json_string_value(json_object_get(row, "head_sha")));
  _cleanup_free_ char *diff = NULL;
  bool truncated;
  size_t files;
  r = tg_git_diff(repo.git, json_string_value(json_object_get(row, "base_sha")), head, DIFF_MAX,
                  &diff, &truncated, &files);
  if (r < 0) return r;
  *ret = json_pack("{s:o,s:s,s:b,s:I}", "pullRequest", pr_json(row), "diff", diff,
                   "diffTruncated", truncated, "filesChanged", (json_int_t)files);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int not_open(tg_call_ctx *cx, json_t *row) {
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                 json_pack("{s:s,s:O}", "reason", "not_open", "state", json_object_get(row, "state")),
                 "Pull request #%lld is %s, not open.",
                 (long long)json_integer_value(json_object_get(row, "number")),
                 json_string_value(json_object_get(row, "state")));
}

static int pr_finish(tg_call_ctx *cx, json_t *row, const tg_scope_repo *repo, const char *state,
                     const char *merged_sha, const char *head_sha) {
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int r = tg_db_exec(cx->db,
                     "UPDATE pull_requests SET state = $1, merged_sha = $2,"
                     " head_sha = COALESCE($3, head_sha), updated_at = $4"
                     " WHERE id = $5 AND state = 'open'",
                     json_pack("[ss?s?sO]", state, merged_sha, head_sha, now,
                               json_object_get(row, "id")),
                     NULL);
  if (r < 0) return r;
  char summary[300];
  snprintf(summary, sizeof summary, "Pull request #%lld in %s %s",
           (long long)json_integer_value(json_object_get(row, "number")), repo->label, state);
  json_t *details = json_pack("{s:s,s:O,s:O,s:O}", "repo", repo->label, "prNumber",
                              json_object_get(row, "number"), "head",
                              json_object_get(row, "head_branch"), "base",
                              json_object_get(row, "base_branch"));
  if (details && merged_sha) json_object_set_new(details, "sha", json_string(merged_sha));
  _cleanup_json_ json_t *scope = tg_repo_activity_scope(repo);
  return tg_activity(cx, strcmp(state, "merged") == 0 ? "PR_MERGED" : "PR_CLOSED", scope, summary,
                     details);
}

static int pr_merge(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *row = NULL, *conflicts = NULL;
  _cleanup_repo_ tg_scope_repo repo = {0};
  int r = find_pr(cx, args, &row, &repo);
  if (r < 0) return r;
  if (strcmp(json_string_value(json_object_get(row, "state")), "open") != 0) return not_open(cx, row);
  const char *base = json_string_value(json_object_get(row, "base_branch"));
  const char *head = json_string_value(json_object_get(row, "head_branch"));
  tg_repo_move move = {0};
  char head_sha[TG_GIT_SHA_LEN + 1];
  snprintf(move.branch, sizeof move.branch, "%s", base);
  if (tg_repo_tip(cx, &repo, base, move.old_sha) < 0 || tg_git_tip(repo.git, head, head_sha) < 0)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s,s:s}", "reason", "branch_missing", "base", base, "head", head),
                   "Branch %s or %s no longer exists.", base, head);
  _cleanup_free_ char *message = NULL;
  if (asprintf(&message, "Merge pull request #%lld from %s\n\n%.*s\n",
               (long long)json_integer_value(json_object_get(row, "number")), head,
               TG_UTF8_CUT(json_string_value(json_object_get(row, "title")), 200)) < 0)
    return TG_E_NOMEM;
  char name[80], email[120];
  identity(cx, name, sizeof name, email, sizeof email);
  bool ff, up_to_date;
  r = tg_git_merge(repo.git, move.old_sha, head_sha, name, email, message, move.new_sha, &ff,
                   &up_to_date, &conflicts);
  if (r == TG_E_CONSTRAINT)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:O}", "reason", "conflict", "conflicts", conflicts),
                   "Pull request #%lld does not merge cleanly into %s; nothing changed.",
                   (long long)json_integer_value(json_object_get(row, "number")), base);
  if (r < 0) return r;
  if (!up_to_date) r = tg_repo_record(cx, &repo, &move);
  if (r == TG_OK) r = pr_finish(cx, row, &repo, "merged", move.new_sha, head_sha);
  if (r == TG_OK && !up_to_date)
    r = tg_repo_publish(cx, &repo, &move,
                        "UPDATE pull_requests SET state = 'open', merged_sha = NULL WHERE id = $1",
                        json_pack("[O]", json_object_get(row, "id")));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:O,s:s,s:s,s:b}", "repo", repo.label, "number",
                   json_object_get(row, "number"), "state", "merged", "sha", move.new_sha,
                   "fastForward", ff);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int pr_close(tg_call_ctx *cx, json_t *args, json_t **ret) {
  _cleanup_json_ json_t *row = NULL;
  _cleanup_repo_ tg_scope_repo repo = {0};
  int r = find_pr(cx, args, &row, &repo);
  if (r < 0) return r;
  if (strcmp(json_string_value(json_object_get(row, "state")), "open") != 0) return not_open(cx, row);
  r = pr_finish(cx, row, &repo, "closed", NULL, NULL);
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:O,s:s}", "repo", repo.label, "number", json_object_get(row, "number"),
                   "state", "closed");
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const tg_handler_entry handlers[] = {
    {"repo.commit.create", commit_create}, {"repo.pr.open", pr_open},
    {"repo.repository.list", repository_list}, {"repo.pr.list", pr_list},
    {"repo.pr.show", pr_show},             {"repo.pr.merge", pr_merge},
    {"repo.pr.close", pr_close},
};

const tg_provider tg_provider_repo = {
    .name = "repo",
    .spec_file = "repo.json",
    .handlers = handlers,
    .n_handlers = sizeof handlers / sizeof handlers[0],
};
