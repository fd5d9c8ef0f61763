#define _GNU_SOURCE
#include "git/git.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "git/libgit2.h"
#include "util/status.h"

#define CONFLICTS_MAX 50
#define MOVE_LOCKED_WAIT_MS 20 /* between tries to take a ref's lock file */

void (*tg_git_test_before_move)(const char *repo_path, const char *branch);

struct tg_git {
  git_repository *repo;
  char *path;
};

/* libgit2 failures that are not an expected outcome are logged once here and reported to the
 * caller as an I/O failure, answered as internal_error. */
int tg_git_open(const char *path, const char *default_branch, tg_git **ret) {
  *ret = NULL;
  if (tg_libgit2_init() < 0) return TG_E_IO;
  tg_git *g = calloc(1, sizeof *g);
  if (!g || !(g->path = strdup(path))) {
    free(g);
    return TG_E_NOMEM;
  }
  if (tg_git2.git_repository_open_bare(&g->repo, path) == 0) {
    *ret = g;
    return TG_OK;
  }
  git_repository_init_options opts;
  if (tg_git2.git_repository_init_options_init(&opts, GIT_REPOSITORY_INIT_OPTIONS_VERSION) < 0) {
    tg_git_close(g);
    return tg_libgit2_fail("init options");
  }
  opts.flags = GIT_REPOSITORY_INIT_BARE | GIT_REPOSITORY_INIT_MKPATH | GIT_REPOSITORY_INIT_MKDIR;
  opts.initial_head = default_branch;
  if (tg_git2.git_repository_init_ext(&g->repo, path, &opts) < 0) {
    int r = tg_libgit2_fail("create repository");
    tg_git_close(g);
    return r;
  }
  *ret = g;
  return TG_OK;
}

void tg_git_close(tg_git *g) {
  if (!g) return;
  tg_git2.git_repository_free(g->repo);
  free(g->path);
  free(g);
}

int tg_git_branch_check(const char *name) {
  size_t len = strlen(name);
  if (len == 0 || len > TG_GIT_BRANCH_MAX) return TG_E_INVAL;
  for (const char *p = name; *p; p++)
    if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') ||
          *p == '.' || *p == '_' || *p == '-' || *p == '/'))
      return TG_E_INVAL;
  if (name[0] == '-') return TG_E_INVAL; /* would read as an option to the git program */
  char ref[TG_GIT_BRANCH_MAX + 16];
  snprintf(ref, sizeof ref, "refs/heads/%s", name);
  int valid = 0;
  if (tg_libgit2_init() < 0) return TG_E_IO;
  return tg_git2.git_reference_name_is_valid(&valid, ref) == 0 && valid ? TG_OK : TG_E_INVAL;
}

static int branch_ref(const char *branch, char *out, size_t size) {
  int r = tg_git_branch_check(branch);
  if (r < 0) return r;
  snprintf(out, size, "refs/heads/%s", branch);
  return TG_OK;
}

static int parse_sha(const char *sha, git_oid *oid) {
  if (!sha || strlen(sha) != TG_GIT_SHA_LEN || tg_git2.git_oid_fromstr(oid, sha) < 0) return TG_E_INVAL;
  return TG_OK;
}

int tg_git_tip(tg_git *g, const char *branch, char sha[TG_GIT_SHA_LEN + 1]) {
  char ref[TG_GIT_BRANCH_MAX + 16];
  if (branch_ref(branch, ref, sizeof ref) < 0) return TG_E_NOTFOUND;
  git_oid oid;
  int e = tg_git2.git_reference_name_to_id(&oid, g->repo, ref);
  if (e == GIT_ENOTFOUND) return TG_E_NOTFOUND;
  if (e < 0) return tg_libgit2_fail("read branch");
  tg_git2.git_oid_tostr(sha, TG_GIT_SHA_LEN + 1, &oid);
  return TG_OK;
}

int tg_git_branches(tg_git *g, size_t max, json_t **ret, bool *truncated) {
  *truncated = false;
  json_t *list = json_array();
  if (!list) return TG_E_NOMEM;
  git_branch_iterator *it = NULL;
  if (tg_git2.git_branch_iterator_new(&it, g->repo, GIT_BRANCH_LOCAL) < 0) {
    json_decref(list);
    return tg_libgit2_fail("list branches");
  }
  git_reference *ref;
  git_branch_t type;
  int e, r = TG_OK;
  while (r == TG_OK && (e = tg_git2.git_branch_next(&ref, &type, it)) == 0) {
    const char *name = NULL;
    if (json_array_size(list) == max) {
      *truncated = true;
      tg_git2.git_reference_free(ref);
      e = GIT_ITEROVER;
      break;
    }
    if (tg_git2.git_branch_name(&name, ref) < 0) r = tg_libgit2_fail("branch name");
    else if (json_array_append_new(list, json_string(name)) < 0) r = TG_E_NOMEM;
    tg_git2.git_reference_free(ref);
  }
  tg_git2.git_branch_iterator_free(it);
  if (r == TG_OK && e != GIT_ITEROVER) r = tg_libgit2_fail("list branches");
  if (r < 0) {
    json_decref(list);
    return r;
  }
  *ret = list;
  return TG_OK;
}

bool tg_git_names_clash(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  return (n < m && strncmp(b, a, n) == 0 && b[n] == '/') ||
         (m < n && strncmp(a, b, m) == 0 && a[m] == '/');
}

/* The tree of commit sha, or the empty tree when sha is NULL. */
static int commit_tree(tg_git *g, const char *sha, git_tree **ret) {
  git_oid oid;
  if (!sha) {
    git_treebuilder *bld = NULL;
    if (tg_git2.git_treebuilder_new(&bld, g->repo, NULL) < 0)
      return tg_libgit2_fail("tree builder");
    int e = tg_git2.git_treebuilder_write(&oid, bld);
    tg_git2.git_treebuilder_free(bld);
    if (e < 0 || tg_git2.git_tree_lookup(ret, g->repo, &oid) < 0)
      return tg_libgit2_fail("empty tree");
    return TG_OK;
  }
  if (parse_sha(sha, &oid) < 0) return TG_E_INVAL;
  git_commit *commit = NULL;
  int e = tg_git2.git_commit_lookup(&commit, g->repo, &oid);
  if (e == GIT_ENOTFOUND) return TG_E_NOTFOUND;
  if (e < 0) return tg_libgit2_fail("read commit");
  e = tg_git2.git_commit_tree(ret, commit);
  tg_git2.git_commit_free(commit);
  return e < 0 ? tg_libgit2_fail("read tree") : TG_OK;
}

int tg_git_read(tg_git *g, const char *sha, const char *path, size_t max, char **ret,
                size_t *ret_len) {
  git_tree *tree = NULL;
  int r = commit_tree(g, sha, &tree);
  if (r < 0) return r;
  git_tree_entry *entry = NULL;
  int e = tg_git2.git_tree_entry_bypath(&entry, tree, path);
  tg_git2.git_tree_free(tree);
  if (e == GIT_ENOTFOUND) return TG_E_NOTFOUND;
  if (e < 0) return tg_libgit2_fail("find file");
  git_filemode_t mode = tg_git2.git_tree_entry_filemode(entry);
  if (mode != GIT_FILEMODE_BLOB && mode != GIT_FILEMODE_BLOB_EXECUTABLE) {
    tg_git2.git_tree_entry_free(entry);
    return TG_E_NOTFOUND;
  }
  git_blob *blob = NULL;
  e = tg_git2.git_blob_lookup(&blob, g->repo, tg_git2.git_tree_entry_id(entry));
  tg_git2.git_tree_entry_free(entry);
  if (e < 0) return tg_libgit2_fail("read blob");
  size_t len = (size_t)tg_git2.git_blob_rawsize(blob);
  if (len > max) {
    tg_git2.git_blob_free(blob);
    return TG_E_TOO_LARGE;
  }
  char *copy = malloc(len + 1);
  if (copy) {
    memcpy(copy, tg_git2.git_blob_rawcontent(blob), len);
    copy[len] = '\0';
  }
  tg_git2.git_blob_free(blob);
  if (!copy) return TG_E_NOMEM;
  *ret = copy;
  *ret_len = len;
  return TG_OK;
}

/* One path under (or equal to) another, as folders: "a" and "a/b", or "a" and "a". */
static bool overlaps(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), l = la < lb ? la : lb;
  if (strncmp(a, b, l) != 0) return false;
  return la == lb || (la < lb ? b[la] == '/' : a[lb] == '/');
}

static int problem_at(tg_git_problem *problem, size_t index, const char *reason) {
  problem->index = index;
  problem->reason = reason;
  return TG_E_INVAL;
}

/* Checks change i against the parent tree: every folder on the way must be a folder (a
 * symbolic link there would let a write land outside the path it names), and the path itself
 * must exist as a file or not exist, as its mode asks. */
static int check_change(git_tree *tree, const tg_git_change *c, size_t i,
                        tg_git_problem *problem) {
  char prefix[4096];
  size_t len = strlen(c->path);
  if (len >= sizeof prefix) return problem_at(problem, i, "not_a_file");
  for (size_t k = 0; k <= len; k++) {
    if (c->path[k] != '/' && c->path[k] != '\0') continue;
    memcpy(prefix, c->path, k);
    prefix[k] = '\0';
    git_tree_entry *entry = NULL;
    int e = tg_git2.git_tree_entry_bypath(&entry, tree, prefix);
    if (e == GIT_ENOTFOUND) {
      if (c->mode != TG_GIT_ADD) return problem_at(problem, i, "missing");
      return TG_OK; /* nothing further down exists either */
    }
    if (e < 0) return tg_libgit2_fail("find path");
    git_filemode_t mode = tg_git2.git_tree_entry_filemode(entry);
    tg_git2.git_tree_entry_free(entry);
    bool last = c->path[k] == '\0';
    if (mode == GIT_FILEMODE_LINK) {
      if (last && c->mode == TG_GIT_DELETE) return TG_OK;
      return problem_at(problem, i, "symlink");
    }
    if (!last) {
      if (mode != GIT_FILEMODE_TREE) return problem_at(problem, i, "under_a_file");
      continue;
    }
    if (mode != GIT_FILEMODE_BLOB && mode != GIT_FILEMODE_BLOB_EXECUTABLE)
      return problem_at(problem, i, "not_a_file");
    if (c->mode == TG_GIT_ADD) return problem_at(problem, i, "exists");
  }
  return TG_OK;
}

int tg_git_commit(tg_git *g, const char *parent_sha, const tg_git_change *changes, size_t n,
                  const char *name, const char *email, const char *message,
                  char sha[TG_GIT_SHA_LEN + 1], tg_git_problem *problem) {
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < i; k++)
      if (overlaps(changes[i].path, changes[k].path)) return problem_at(problem, i, "duplicate");

  git_tree *base = NULL, *tree = NULL;
  git_commit *parent = NULL;
  git_signature *who = NULL;
  git_tree_update *updates = NULL;
  int r = commit_tree(g, parent_sha, &base);
  if (r < 0) return r;
  for (size_t i = 0; r == TG_OK && i < n; i++) r = check_change(base, &changes[i], i, problem);
  if (r == TG_OK && n && !(updates = calloc(n, sizeof *updates))) r = TG_E_NOMEM;
  for (size_t i = 0; r == TG_OK && i < n; i++) {
    updates[i].path = changes[i].path;
    if (changes[i].mode == TG_GIT_DELETE) {
      updates[i].action = GIT_TREE_UPDATE_REMOVE;
      continue;
    }
    updates[i].action = GIT_TREE_UPDATE_UPSERT;
    updates[i].filemode = GIT_FILEMODE_BLOB;
    if (tg_git2.git_blob_create_from_buffer(&updates[i].id, g->repo, changes[i].content, changes[i].len) < 0)
      r = tg_libgit2_fail("write blob");
  }
  git_oid tree_id, commit_id, parent_id;
  if (r == TG_OK && tg_git2.git_tree_create_updated(&tree_id, g->repo, base, n, updates) < 0)
    r = tg_libgit2_fail("write tree");
  /* A commit changing nothing (a modify to the same content) is refused, as git refuses it. */
  if (r == TG_OK && parent_sha && tg_git2.git_oid_equal(&tree_id, tg_git2.git_tree_id(base)))
    r = problem_at(problem, 0, "no_change");
  if (r == TG_OK && tg_git2.git_tree_lookup(&tree, g->repo, &tree_id) < 0)
    r = tg_libgit2_fail("read tree");
  if (r == TG_OK && parent_sha &&
      (parse_sha(parent_sha, &parent_id) < 0 ||
       tg_git2.git_commit_lookup(&parent, g->repo, &parent_id) < 0))
    r = tg_libgit2_fail("read parent");
  if (r == TG_OK && tg_git2.git_signature_now(&who, name, email) < 0)
    r = tg_libgit2_fail("signature");
  const git_commit *parents[1] = {parent};
  if (r == TG_OK && tg_git2.git_commit_create(&commit_id, g->repo, NULL, who, who, NULL, message, tree,
                                      parent ? 1 : 0, parents) < 0)
    r = tg_libgit2_fail("write commit");
  if (r == TG_OK) tg_git2.git_oid_tostr(sha, TG_GIT_SHA_LEN + 1, &commit_id);
  free(updates);
  tg_git2.git_signature_free(who);
  tg_git2.git_commit_free(parent);
  tg_git2.git_tree_free(tree);
  tg_git2.git_tree_free(base);
  return r;
}

/* Runs a ref change until it is not refused for the ref's lock file, or wait_ms has passed:
 * another writer holds the lock file for the moment it moves the ref. */
typedef int ref_change_fn(tg_git *g, const char *ref, void *arg);
static int change_ref(tg_git *g, const char *ref, ref_change_fn *change, void *arg, int wait_ms) {
  if (tg_git_test_before_move) tg_git_test_before_move(g->path, ref + strlen("refs/heads/"));
  int e;
  for (int waited = 0;; waited += MOVE_LOCKED_WAIT_MS) {
    e = change(g, ref, arg);
    if (e != GIT_ELOCKED || waited >= wait_ms) return e;
    nanosleep(&(struct timespec){0, MOVE_LOCKED_WAIT_MS * 1000000L}, NULL);
  }
}

typedef struct move_change {
  const git_oid *old_id, *new_id;
  const char *why;
} move_change;

static int move_ref(tg_git *g, const char *ref, void *arg) {
  const move_change *m = arg;
  git_reference *out = NULL;
  int e = m->old_id ? tg_git2.git_reference_create_matching(&out, g->repo, ref, m->new_id, 1,
                                                            m->old_id, m->why)
                    : tg_git2.git_reference_create(&out, g->repo, ref, m->new_id, 0, m->why);
  tg_git2.git_reference_free(out);
  return e;
}

int tg_git_move(tg_git *g, const char *branch, const char *old_sha, const char *new_sha,
                const char *why, int wait_ms) {
  char ref[TG_GIT_BRANCH_MAX + 16];
  git_oid old_id, new_id;
  if (branch_ref(branch, ref, sizeof ref) < 0 || parse_sha(new_sha, &new_id) < 0 ||
      (old_sha && parse_sha(old_sha, &old_id) < 0))
    return TG_E_INVAL;
  move_change m = {old_sha ? &old_id : NULL, &new_id, why};
  int e = change_ref(g, ref, move_ref, &m, wait_ms);
  if (e == GIT_EMODIFIED || e == GIT_EEXISTS || (old_sha && e == GIT_ENOTFOUND))
    return TG_E_CONSTRAINT;
  if (e == GIT_ELOCKED) return TG_E_LOCKED;
  return e < 0 ? tg_libgit2_fail("move branch") : TG_OK;
}

/* git_reference_delete refuses (GIT_EMODIFIED) a ref moved since it was looked up. */
static int delete_ref(tg_git *g, const char *ref, void *arg) {
  const git_oid *at = arg;
  git_reference *found = NULL;
  int e = tg_git2.git_reference_lookup(&found, g->repo, ref);
  const git_oid *target = e == 0 ? tg_git2.git_reference_target(found) : NULL;
  if (e == 0) e = target && tg_git2.git_oid_equal(target, at) ? tg_git2.git_reference_delete(found)
                                                               : GIT_EMODIFIED;
  tg_git2.git_reference_free(found);
  return e;
}

int tg_git_remove(tg_git *g, const char *branch, const char *old_sha, int wait_ms) {
  char ref[TG_GIT_BRANCH_MAX + 16];
  git_oid old_id;
  if (branch_ref(branch, ref, sizeof ref) < 0 || parse_sha(old_sha, &old_id) < 0)
    return TG_E_INVAL;
  int e = change_ref(g, ref, delete_ref, &old_id, wait_ms);
  if (e == GIT_EMODIFIED || e == GIT_ENOTFOUND) return TG_E_CONSTRAINT;
  if (e == GIT_ELOCKED) return TG_E_LOCKED;
  return e < 0 ? tg_libgit2_fail("delete branch") : TG_OK;
}

int tg_git_contains(tg_git *g, const char *branch, const char *sha, bool *yes) {
  *yes = false;
  char ref[TG_GIT_BRANCH_MAX + 16];
  git_oid want, tip;
  if (branch_ref(branch, ref, sizeof ref) < 0 || parse_sha(sha, &want) < 0) return TG_E_INVAL;
  int e = tg_git2.git_reference_name_to_id(&tip, g->repo, ref);
  if (e == GIT_ENOTFOUND) return TG_OK;
  if (e < 0) return tg_libgit2_fail("read branch");
  if (tg_git2.git_oid_equal(&tip, &want)) {
    *yes = true;
    return TG_OK;
  }
  e = tg_git2.git_graph_descendant_of(g->repo, &tip, &want);
  if (e < 0) return tg_libgit2_fail("walk history");
  *yes = e == 1;
  return TG_OK;
}

static int lookup_commit(tg_git *g, const char *sha, git_commit **ret) {
  git_oid oid;
  if (parse_sha(sha, &oid) < 0) return TG_E_INVAL;
  int e = tg_git2.git_commit_lookup(ret, g->repo, &oid);
  if (e == GIT_ENOTFOUND) return TG_E_NOTFOUND;
  return e < 0 ? tg_libgit2_fail("read commit") : TG_OK;
}

int tg_git_diff(tg_git *g, const char *from_sha, const char *to_sha, size_t max, char **ret,
                bool *truncated, size_t *files) {
  git_tree *from = NULL, *to = NULL;
  git_diff *diff = NULL;
  git_buf buf = GIT_BUF_INIT;
  int r = commit_tree(g, from_sha, &from);
  if (r == TG_OK) r = commit_tree(g, to_sha, &to);
  if (r == TG_OK && tg_git2.git_diff_tree_to_tree(&diff, g->repo, from, to, NULL) < 0) r = tg_libgit2_fail("diff");
  if (r == TG_OK && tg_git2.git_diff_to_buf(&buf, diff, GIT_DIFF_FORMAT_PATCH) < 0) r = tg_libgit2_fail("diff text");
  if (r == TG_OK) {
    *files = tg_git2.git_diff_num_deltas(diff);
    size_t len = buf.size;
    *truncated = len > max;
    if (*truncated) {
      len = max;
      while (len > 0 && ((unsigned char)buf.ptr[len] & 0xC0) == 0x80) len--; /* UTF-8 boundary */
    }
    if (!(*ret = strndup(buf.ptr ? buf.ptr : "", len))) r = TG_E_NOMEM;
  }
  tg_git2.git_buf_dispose(&buf);
  tg_git2.git_diff_free(diff);
  tg_git2.git_tree_free(to);
  tg_git2.git_tree_free(from);
  return r;
}

static int collect_conflicts(git_index *index, json_t **ret) {
  json_t *paths = json_array();
  git_index_conflict_iterator *it = NULL;
  if (!paths) return TG_E_NOMEM;
  if (tg_git2.git_index_conflict_iterator_new(&it, index) < 0) {
    json_decref(paths);
    return tg_libgit2_fail("conflicts");
  }
  const git_index_entry *ancestor, *ours, *theirs;
  while (json_array_size(paths) < CONFLICTS_MAX &&
         tg_git2.git_index_conflict_next(&ancestor, &ours, &theirs, it) == 0) {
    const git_index_entry *any = ours ? ours : theirs ? theirs : ancestor;
    json_array_append_new(paths, json_string(any->path));
  }
  tg_git2.git_index_conflict_iterator_free(it);
  *ret = paths;
  return TG_OK;
}

int tg_git_merge(tg_git *g, const char *base_sha, const char *head_sha, const char *name,
                 const char *email, const char *message, char sha[TG_GIT_SHA_LEN + 1],
                 bool *fast_forward, bool *up_to_date, json_t **conflicts) {
  *fast_forward = *up_to_date = false;
  *conflicts = NULL;
  git_commit *base = NULL, *head = NULL;
  git_index *index = NULL;
  git_tree *tree = NULL;
  git_signature *who = NULL;
  int r = lookup_commit(g, base_sha, &base);
  if (r == TG_OK) r = lookup_commit(g, head_sha, &head);
  if (r < 0) goto out;
  const git_oid *base_id = tg_git2.git_commit_id(base), *head_id = tg_git2.git_commit_id(head);
  if (tg_git2.git_oid_equal(base_id, head_id) || tg_git2.git_graph_descendant_of(g->repo, base_id, head_id) == 1) {
    *up_to_date = true;
    snprintf(sha, TG_GIT_SHA_LEN + 1, "%s", base_sha);
    goto out;
  }
  int e = tg_git2.git_graph_descendant_of(g->repo, head_id, base_id);
  if (e < 0) {
    r = tg_libgit2_fail("ancestry");
    goto out;
  }
  if (e == 1) {
    *fast_forward = true;
    snprintf(sha, TG_GIT_SHA_LEN + 1, "%s", head_sha);
    goto out;
  }
  if (tg_git2.git_merge_commits(&index, g->repo, base, head, NULL) < 0) {
    r = tg_libgit2_fail("merge");
    goto out;
  }
  if (tg_git2.git_index_has_conflicts(index)) {
    r = collect_conflicts(index, conflicts);
    if (r == TG_OK) r = TG_E_CONSTRAINT;
    goto out;
  }
  git_oid tree_id, commit_id;
  if (tg_git2.git_index_write_tree_to(&tree_id, index, g->repo) < 0 ||
      tg_git2.git_tree_lookup(&tree, g->repo, &tree_id) < 0 || tg_git2.git_signature_now(&who, name, email) < 0) {
    r = tg_libgit2_fail("merge tree");
    goto out;
  }
  const git_commit *parents[2] = {base, head};
  if (tg_git2.git_commit_create(&commit_id, g->repo, NULL, who, who, NULL, message, tree, 2, parents) < 0) {
    r = tg_libgit2_fail("merge commit");
    goto out;
  }
  tg_git2.git_oid_tostr(sha, TG_GIT_SHA_LEN + 1, &commit_id);
out:
  tg_git2.git_signature_free(who);
  tg_git2.git_tree_free(tree);
  tg_git2.git_index_free(index);
  tg_git2.git_commit_free(head);
  tg_git2.git_commit_free(base);
  return r;
}
