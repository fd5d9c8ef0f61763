/* Which paths an agent may name in a commit (seed 000 §3.5, security §5). Pure: no I/O.
 *
 * A path is a portable, normalized, relative name: ASCII letters, digits and " ._-+@=,~"
 * between single slashes, no "." or ".." component, no ".git" component (in any case, nor its
 * 8.3 short name "git~1"), no ".gitmodules", no backslash, colon, NUL or control character,
 * no component that starts with "-" or ends with "." or a space. Non-ASCII names are refused
 * outright: look-alikes (U+2215 for "/", U+FF0E for ".") and the NFC/NFD forms of one name
 * cannot be told apart safely without a full Unicode database, and a repository shared with
 * ordinary git clients gains nothing from them. Symbolic links already in the tree are
 * checked against the tree itself (git/git.h). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define TG_REPO_PATH_MAX 1024     /* bytes of a path */
#define TG_REPO_COMPONENT_MAX 255 /* bytes of one component */

/* NULL when path is acceptable, else the reason (a short stable phrase, safe to show). */
const char *tg_repo_path_check(const char *path, size_t len);

/* Whether path lies in the folder prefix ("" = the whole tree): prefix "a/b" holds "a/b/c"
 * but not "a/bc" nor "a/b" itself. */
bool tg_repo_path_under(const char *path, const char *prefix);

/* Whether path is reserved for agent files (".works/agents/..." and
 * ".works/ideas/<id>/agents/...", and the folders leading to them), which change only
 * through editAgentFile, with its hash, secret scan and per-run cap. */
bool tg_repo_path_reserved(const char *path);
