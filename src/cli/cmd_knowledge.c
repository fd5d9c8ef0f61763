/* Operator commands kb, skills and activity: tool calls of the knowledge provider made as
 * the workspace owner, so people pass the same gate and leave the same audit trail. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/cleanup.h"

/* Files are read with room to spare over the tools' bounds (counted in characters), so the
 * tool, not the file size, says what is too long. */
#define KB_FILE_MAX (4u << 20)
#define SKILL_FILE_MAX (1u << 20)

static const char *str(json_t *object, const char *key) {
  const char *s = json_string_value(json_object_get(object, key));
  return s ? s : "";
}

static const char kb_usage[] =
    "usage: toolgate kb put --work SLUG --slug SLUG --title TITLE --file FILE\n"
    "       toolgate kb list [--limit N] [--json]\n\n"
    "A knowledge-base document belongs to a work; put replaces the document with the same slug\n"
    "in that work. Agents that reach the work read it with kb.document.get, as user content.\n";

static int kb_put(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"work", required_argument, NULL, 'w'},
                                          {"slug", required_argument, NULL, 's'},
                                          {"title", required_argument, NULL, 't'},
                                          {"file", required_argument, NULL, 'f'},
                                          {0}};
  const char *work = NULL, *slug = NULL, *title = NULL, *file = NULL;
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "kb put", &seen)) != -1) {
    switch (opt) {
    case 'w': work = optarg; break;
    case 's': slug = optarg; break;
    case 't': title = optarg; break;
    case 'f': file = optarg; break;
    default: return cli_usage(kb_usage, "kb put: bad option");
    }
  }
  if (optind < argc) return cli_usage(kb_usage, "kb put: unexpected '%s'", argv[optind]);
  if (!work || !slug || !title || !file)
    return cli_usage(kb_usage, "kb put: --work, --slug, --title and --file are required");
  _cleanup_free_ char *body = cli_read_file(file, KB_FILE_MAX);
  if (!body) return CLI_FAILED;
  return cli_operate(c, "kb.document.put",
                 json_pack("{s:s,s:s,s:s,s:s}", "workSlug", work, "slug", slug, "title", title,
                           "body", body),
                 true, NULL);
}

static void show_documents(json_t *result) {
  printf("%-24s %-32s %10s  %-24s  %s\n", "WORK", "SLUG", "CHARS", "UPDATED", "TITLE");
  size_t i;
  json_t *d;
  json_array_foreach(json_object_get(result, "documents"), i, d) {
    printf("%-24s %-32s %10lld  %-24s  %s\n", str(d, "workSlug"), str(d, "slug"),
           (long long)json_integer_value(json_object_get(d, "characters")), str(d, "updatedAt"),
           str(d, "title"));
  }
  cli_more_note(result);
}

static int kb_list(cli *c, int argc, char **argv) {
  return cli_list(c, argc, argv, kb_usage, "kb list", "kb.document.list", show_documents);
}

int cmd_kb(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"put", kb_put, NULL}, {"list", kb_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, kb_usage);
}

static const char skills_usage[] =
    "usage: toolgate skills add FILE [--bind tenant|mission:SLUG|work:SLUG|agent:SLUG]...\n"
    "       toolgate skills list [--limit N] [--json]\n\n"
    "A skill file is Markdown behind a YAML front matter:\n"
    "  ---\n"
    "  name: Release notes\n"
    "  description: Write release notes from the week's activity.\n"
    "  allowed-tools: [work.activity.list, kb.document.get]\n"
    "  examples: [{input: Notes for this week, output: \"## Week 21\"}]\n"
    "  ---\n"
    "  The instructions...\n"
    "add replaces the skill with the same slug (the front matter's slug, else made from the\n"
    "name) and adds the bindings; a skill is active for the callers its bindings reach.\n";

static int skills_add(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"bind", required_argument, NULL, 'b'}, {0}};
  _cleanup_json_ json_t *bindings = json_array();
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, "b", "skills add", &seen)) != -1) {
    if (opt != 'b') return cli_usage(skills_usage, "skills add: bad option");
    json_array_append_new(bindings, json_string(optarg));
  }
  if (optind + 1 != argc) return cli_usage(skills_usage, "skills add: give one FILE");
  _cleanup_free_ char *text = cli_read_file(argv[optind], SKILL_FILE_MAX);
  if (!text) return CLI_FAILED;
  return cli_operate(c, "skill.catalog.add",
                 json_pack("{s:s,s:O}", "text", text, "bindings", bindings), true, NULL);
}

static void show_skills(json_t *result) {
  printf("%-28s %-28s %s\n", "SKILL", "NAME", "BOUND TO");
  size_t i, k;
  json_t *s, *b;
  json_array_foreach(json_object_get(result, "skills"), i, s) {
    printf("%-28s %-28s ", str(s, "slug"), str(s, "name"));
    json_array_foreach(json_object_get(s, "bindings"), k, b)
      printf("%s%s", k ? "," : "", json_string_value(b));
    if (json_array_size(json_object_get(s, "bindings")) == 0) printf("(nothing: inactive)");
    putchar('\n');
  }
  cli_more_note(result);
}

static int skills_list(cli *c, int argc, char **argv) {
  return cli_list(c, argc, argv, skills_usage, "skills list", "skill.catalog.list", show_skills);
}

int cmd_skills(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"add", skills_add, NULL}, {"list", skills_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, skills_usage);
}

static const char activity_usage[] =
    "usage: toolgate activity [--limit N] [--json]\n\n"
    "The workspace's activity of the last 24 hours, newest first (--limit 1..100, default 20),\n"
    "as the owner sees it: every mission, idea and work.\n";

static void show_activity(json_t *result) {
  printf("%-24s %-24s %s\n", "WHEN", "TYPE", "SUMMARY");
  size_t i;
  json_t *row;
  json_array_foreach(json_object_get(result, "rows"), i, row) {
    printf("%-24s %-24s %s\n", str(row, "createdAt"), str(row, "actionType"), str(row, "summary"));
  }
  cli_more_note(result);
}

int cmd_activity(cli *c, int argc, char **argv) {
  if (cli_wants_help(argc, argv, activity_usage)) return CLI_OK;
  optind = 1;
  return cli_list(c, argc, argv, activity_usage, "activity", "work.activity.list", show_activity);
}
