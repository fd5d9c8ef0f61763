/* Operator commands on repositories and pull requests: each is a tool call of the repo
 * provider made as the workspace owner, like every operator command. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/cleanup.h"

static const char repos_usage[] =
    "usage: toolgate repos list [--limit N] [--json]\n\n"
    "Lists the workspace's git repositories (created when an agent first writes to them)\n"
    "with the folder each lives in: 'git clone PATH' gives a working copy. At most N\n"
    "(default 50) repositories, by name.\n";

static void show_repos(json_t *result) {
  printf("%-32s %-6s %-8s %s\n", "REPO", "OPEN", "DEFAULT", "PATH");
  size_t i;
  json_t *r;
  json_array_foreach(json_object_get(result, "repos"), i, r) {
    printf("%-32s %-6lld %-8s %s\n", json_string_value(json_object_get(r, "repo")),
           (long long)json_integer_value(json_object_get(r, "openPullRequests")),
           json_string_value(json_object_get(r, "defaultBranch")),
           json_string_value(json_object_get(r, "path")));
  }
  cli_more_note(result);
}

static int repos_list(cli *c, int argc, char **argv) {
  return cli_list(c, argc, argv, repos_usage, "repos list", "repo.repository.list", show_repos);
}

int cmd_repos(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"list", repos_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, sizeof subs / sizeof subs[0], repos_usage);
}

static const char prs_usage[] =
    "usage: toolgate prs list [--repo REPO] [--state open|merged|closed] [--limit N] [--json]\n"
    "       toolgate prs show REPO NUMBER [--json]\n"
    "       toolgate prs merge REPO NUMBER\n"
    "       toolgate prs close REPO NUMBER\n\n"
    "REPO is work:SLUG/data, work:SLUG/website or mission:SLUG/mission (see 'repos list').\n"
    "A merge fast-forwards when it can, else makes a merge commit; a conflict refuses it.\n";

static void show_prs(json_t *result) {
  printf("%-28s %-5s %-7s %-24s %-16s %s\n", "REPO", "#", "STATE", "BRANCH", "AUTHOR", "TITLE");
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(result, "pullRequests"), i, p) {
    printf("%-28s %-5lld %-7s %-24s %-16s %s\n", json_string_value(json_object_get(p, "repo")),
           (long long)json_integer_value(json_object_get(p, "number")),
           json_string_value(json_object_get(p, "state")),
           json_string_value(json_object_get(p, "head")),
           json_string_value(json_object_get(p, "author")),
           json_string_value(json_object_get(p, "title")));
  }
  cli_more_note(result);
}

static int prs_list(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {
      {"repo", "repo", false}, {"state", "state", false}, {"limit", "limit", true}};
  _cleanup_json_ json_t *args = json_object();
  bool json = false;
  int r = cli_parse_options(argc, argv, prs_usage, "prs list", keys, 3, args, NULL, &json);
  if (r != CLI_OK) return r;
  return cli_operate(c, "repo.pr.list", json_incref(args), json, show_prs);
}

/* REPO NUMBER [--json] → the tool's arguments, or NULL after printing the usage error. */
static json_t *pr_args(int argc, char **argv, bool allow_json, bool *json) {
  *json = false;
  const char *pos[2] = {0};
  int n = 0;
  for (int i = 1; i < argc; i++) {
    if (allow_json && strcmp(argv[i], "--json") == 0) *json = true;
    else if (n < 2) pos[n++] = argv[i];
    else n = 3;
  }
  char *end = NULL;
  errno = 0;
  long long number = n == 2 ? strtoll(pos[1], &end, 10) : 0;
  if (n != 2 || *end || number < 1 || errno == ERANGE) {
    cli_usage(prs_usage, "prs %s: give REPO and a pull request NUMBER", argv[0]);
    return NULL;
  }
  return json_pack("{s:s,s:I}", "repo", pos[0], "number", (json_int_t)number);
}

static void show_pr(json_t *result) {
  json_t *p = json_object_get(result, "pullRequest");
  printf("#%lld %s [%s] %s → %s by %s\n\n",
         (long long)json_integer_value(json_object_get(p, "number")),
         json_string_value(json_object_get(p, "title")),
         json_string_value(json_object_get(p, "state")),
         json_string_value(json_object_get(p, "head")),
         json_string_value(json_object_get(p, "base")),
         json_string_value(json_object_get(p, "author")));
  const char *body = json_string_value(json_object_get(p, "body"));
  if (body && *body) printf("%s\n\n", body); /* a pull request opened with none has none */
  fputs(json_string_value(json_object_get(result, "diff")), stdout);
  if (json_is_true(json_object_get(result, "diffTruncated"))) puts("(diff truncated)");
}

static int prs_show(cli *c, int argc, char **argv) {
  bool json;
  json_t *args = pr_args(argc, argv, true, &json);
  return args ? cli_operate(c, "repo.pr.show", args, json, show_pr) : CLI_USAGE;
}

static int prs_merge(cli *c, int argc, char **argv) {
  bool json;
  json_t *args = pr_args(argc, argv, false, &json);
  return args ? cli_operate(c, "repo.pr.merge", args, true, NULL) : CLI_USAGE;
}

static int prs_close(cli *c, int argc, char **argv) {
  bool json;
  json_t *args = pr_args(argc, argv, false, &json);
  return args ? cli_operate(c, "repo.pr.close", args, true, NULL) : CLI_USAGE;
}

int cmd_prs(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"list", prs_list, NULL},
                                     {"show", prs_show, NULL},
                                     {"merge", prs_merge, NULL},
                                     {"close", prs_close, NULL}};
  return cli_dispatch(c, argc, argv, subs, sizeof subs / sizeof subs[0], prs_usage);
}
