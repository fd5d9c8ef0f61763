/* libgit2, loaded with dlopen at the first use of a repository rather than at start-up:
 * it brings libssh2, OpenSSL, mbedTLS and Kerberos, about 2.8 MiB resident that a server
 * which never touches a repository should not carry. Only src/git uses it. */
#pragma once
#include <git2.h>

/* Every libgit2 function src/git calls. */
#define TG_LIBGIT2_FUNCTIONS(X) \
  X(git_blob_create_from_buffer) X(git_blob_free) X(git_blob_lookup) X(git_blob_rawcontent) \
  X(git_blob_rawsize) X(git_branch_iterator_free) X(git_branch_iterator_new) X(git_branch_name) \
  X(git_branch_next) X(git_buf_dispose) X(git_commit_create) X(git_commit_free) \
  X(git_commit_id) X(git_commit_lookup) X(git_commit_tree) X(git_diff_free) \
  X(git_diff_num_deltas) X(git_diff_to_buf) X(git_diff_tree_to_tree) X(git_error_last) \
  X(git_graph_descendant_of) X(git_index_conflict_iterator_free) \
  X(git_index_conflict_iterator_new) X(git_index_conflict_next) X(git_index_free) \
  X(git_index_has_conflicts) X(git_index_write_tree_to) X(git_libgit2_init) \
  X(git_merge_commits) X(git_oid_equal) X(git_oid_fromstr) \
  X(git_oid_tostr) X(git_reference_create) X(git_reference_create_matching) \
  X(git_reference_delete) X(git_reference_free) X(git_reference_lookup) \
  X(git_reference_name_is_valid) X(git_reference_name_to_id) X(git_reference_target) \
  X(git_repository_free) X(git_repository_init_ext) X(git_repository_init_options_init) \
  X(git_repository_open_bare) X(git_signature_free) X(git_signature_now) \
  X(git_tree_create_updated) X(git_tree_entry_bypath) X(git_tree_entry_filemode) \
  X(git_tree_entry_free) X(git_tree_entry_id) X(git_tree_free) X(git_tree_id) \
  X(git_tree_lookup) X(git_treebuilder_free) X(git_treebuilder_new) X(git_treebuilder_write)

struct tg_libgit2 {
#define TG_LIBGIT2_POINTER(f) __typeof__(f) *f;
  TG_LIBGIT2_FUNCTIONS(TG_LIBGIT2_POINTER)
#undef TG_LIBGIT2_POINTER
};

/* The functions; valid once tg_libgit2_init has succeeded. */
extern struct tg_libgit2 tg_git2;

/* Loads and initializes libgit2, once per process (never shut down). 0, or TG_E_IO with the
 * reason logged. */
int tg_libgit2_init(void);

/* Logs what failed with libgit2's last error; returns TG_E_IO. */
int tg_libgit2_fail(const char *what);
