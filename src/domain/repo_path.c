#include "domain/repo_path.h"

#include <string.h>
#include <strings.h>

static bool portable(char c) {
  return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') ||
         strchr(" ._-+@=,~", c) != NULL;
}

static const char *check_component(const char *c, size_t len) {
  if (len == 0) return "empty component (leading, trailing or double slash)";
  if (len > TG_REPO_COMPONENT_MAX) return "component too long";
  if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
    return "'.' or '..' component";
  if ((len == 4 && strncasecmp(c, ".git", 4) == 0) || (len == 5 && strncasecmp(c, "git~1", 5) == 0))
    return "'.git' component";
  if (len == 11 && strncasecmp(c, ".gitmodules", 11) == 0) return "'.gitmodules' is not allowed";
  if (c[0] == '-') return "component starts with '-'";
  if (c[len - 1] == '.' || c[len - 1] == ' ') return "component ends with '.' or a space";
  return NULL;
}

const char *tg_repo_path_check(const char *path, size_t len) {
  if (len == 0) return "empty path";
  if (len > TG_REPO_PATH_MAX) return "path too long";
  if (path[0] == '/') return "absolute path";
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)path[i];
    if (ch == '\0' || ch < 0x20 || ch == 0x7f) return "NUL or control character";
    if (ch >= 0x80) return "non-ASCII character";
    if (ch == '\\') return "backslash";
    if (ch != '/' && !portable((char)ch)) return "character not allowed";
  }
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && path[i] != '/') continue;
    const char *why = check_component(path + start, i - start);
    if (why) return why;
    start = i + 1;
  }
  return NULL;
}

bool tg_repo_path_under(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  if (n == 0) return true;
  return strncmp(path, prefix, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

/* Case-insensitive: a clone on a case-insensitive file system would merge ".Works/Agents"
 * into ".works/agents". */
static bool under_nocase(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  return strncasecmp(path, prefix, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

bool tg_repo_path_reserved(const char *path) {
  /* The folders on the way count too: a file in one's place would block every agent file
   * under it. */
  if (strcasecmp(path, ".works") == 0 || strcasecmp(path, ".works/agents") == 0 ||
      strcasecmp(path, ".works/ideas") == 0 || under_nocase(path, ".works/agents"))
    return true;
  if (!under_nocase(path, ".works/ideas")) return false;
  const char *slash = strchr(path + strlen(".works/ideas/"), '/');
  return !slash || strcasecmp(slash + 1, "agents") == 0 || under_nocase(slash + 1, "agents");
}
