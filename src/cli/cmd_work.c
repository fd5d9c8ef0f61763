/* Operator commands on work: missions, ideas, works, tasks. Each is a tool call of the work
 * provider made as the workspace owner, like the admin commands. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/cleanup.h"

static const char *str(json_t *object, const char *key) {
  const char *s = json_string_value(json_object_get(object, key));
  return s ? s : "-";
}

/* Checks that every key named is in args. */
static int require(json_t *args, const char *usage, const char *cmd, const char *const *keys,
                   const char *const *options) {
  for (size_t i = 0; keys[i]; i++)
    if (!json_object_get(args, keys[i])) return cli_usage(usage, "%s: --%s is required", cmd, options[i]);
  return CLI_OK;
}

static const char missions_usage[] =
    "usage: toolgate missions create --slug S --title T [--description D] [--cap-cents N]\n"
    "       toolgate missions list [--limit N] [--json]\n\n"
    "A mission holds ideas and works; agents, tasks and spend are scoped to it. list shows the\n"
    "first 100 missions (--limit 1..100) and counts each one's ideas and works.\n";

static int missions_create(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"slug", "slug", false},
                                        {"title", "title", false},
                                        {"description", "description", false},
                                        {"cap-cents", "capCents", true}};
  json_t *args = json_object();
  int r =
      cli_parse_options(argc, argv, missions_usage, "missions create", keys, 4, args, NULL, NULL);
  if (r == CLI_OK)
    r = require(args, missions_usage, "missions create", (const char *const[]){"slug", "title", NULL},
                (const char *const[]){"slug", "title"});
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  return cli_operate(c, "work.mission.create", args, true, NULL);
}

static void show_missions(json_t *result) {
  printf("%-24s %-9s %-6s %-6s %-12s %s\n", "MISSION", "STATUS", "IDEAS", "WORKS", "SPEND/CAP", "TITLE");
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(result, "missions"), i, m) {
    char spend[48];
    json_t *cap = json_object_get(m, "capCents");
    long long spent = (long long)json_integer_value(json_object_get(m, "currentSpendCents"));
    if (json_is_integer(cap)) snprintf(spend, sizeof spend, "%lld/%lld", spent, (long long)json_integer_value(cap));
    else snprintf(spend, sizeof spend, "%lld/-", spent);
    printf("%-24s %-9s %-6lld %-6lld %-12s %s\n", str(m, "slug"), str(m, "status"),
           (long long)json_integer_value(json_object_get(m, "ideaCount")),
           (long long)json_integer_value(json_object_get(m, "workCount")), spend, str(m, "title"));
  }
  if (json_is_true(json_object_get(result, "truncated")))
    puts("(more missions not shown: --limit goes up to 100)");
}

static int missions_list(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"limit", "limit", true}};
  bool json = false;
  json_t *args = json_object();
  int r =
      cli_parse_options(argc, argv, missions_usage, "missions list", keys, 1, args, NULL, &json);
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  if (!json_object_get(args, "limit")) json_object_set_new(args, "limit", json_integer(100));
  return cli_operate(c, "work.mission.list", args, json, show_missions);
}

int cmd_missions(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"create", missions_create, NULL}, {"list", missions_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, missions_usage);
}

/* Whether an ideas or works listing left any out (a mission lists its first 100 of each, with
 * their count; the list, its first 100 missions); with say, prints what it left out. */
static bool part_left_out(json_t *result, const char *part, const char *count_key, bool say) {
  bool left_out = json_is_true(json_object_get(result, "truncated"));
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(result, "missions"), i, m) {
    json_int_t count = json_integer_value(json_object_get(m, count_key));
    size_t shown = json_array_size(json_object_get(m, part));
    if ((size_t)count <= shown) continue;
    left_out = true;
    if (say)
      printf("(mission %s: the first %zu of its %lld %s shown)\n", str(m, "slug"), shown,
             (long long)count, part);
  }
  if (say && json_is_true(json_object_get(result, "truncated")))
    puts("(missions past the first 100 not shown: name one with --mission)");
  return left_out;
}

/* ideas list and works list show one part of the mission list, so there is one query. */
static int list_part(cli *c, int argc, char **argv, const char *usage, void (*show)(json_t *),
                     const char *part, const char *count_key) {
  static const cli_option_key keys[] = {{"mission", "missionSlug", false}};
  bool json = false;
  json_t *args = json_object();
  char command[16];
  snprintf(command, sizeof command, "%s list", part);
  int r = cli_parse_options(argc, argv, usage, command, keys, 1, args, NULL, &json);
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  json_object_set_new(args, "limit", json_integer(100));
  if (!json) return cli_operate(c, "work.mission.list", args, false, show);
  /* --json: the part of every mission, flattened, each entry naming its mission, and whether
   * the listing left any out. */
  _cleanup_json_ json_t *result = NULL;
  r = cli_open(c, false) == CLI_OK ? cli_operator_call(c, "work.mission.list", args, &result) : CLI_FAILED;
  json_decref(args);
  if (r != CLI_OK) return r;
  _cleanup_json_ json_t *flat = json_array();
  size_t i, k;
  json_t *m, *entry;
  json_array_foreach(json_object_get(result, "missions"), i, m) {
    json_array_foreach(json_object_get(m, part), k, entry) {
      json_t *copy = json_copy(entry);
      json_object_set(copy, "mission", json_object_get(m, "slug"));
      json_array_append_new(flat, copy);
    }
  }
  _cleanup_json_ json_t *out = json_pack("{s:O,s:b}", part, flat, "truncated",
                                         part_left_out(result, part, count_key, false));
  if (!out) return CLI_FAILED;
  cli_print_json(out);
  return CLI_OK;
}

static const char ideas_usage[] =
    "usage: toolgate ideas create --mission S --title T\n"
    "       toolgate ideas list [--mission S] [--json]\n\n"
    "An idea belongs to a mission; its slug is made from its title and printed.\n";

static int ideas_create(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"mission", "missionSlug", false},
                                        {"title", "title", false}};
  json_t *args = json_object();
  int r = cli_parse_options(argc, argv, ideas_usage, "ideas create", keys, 2, args, NULL, NULL);
  if (r == CLI_OK)
    r = require(args, ideas_usage, "ideas create", (const char *const[]){"missionSlug", "title", NULL},
                (const char *const[]){"mission", "title"});
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  return cli_operate(c, "work.idea.create", args, true, NULL);
}

static void show_ideas(json_t *result) {
  printf("%-24s %-32s %-9s %s\n", "MISSION", "IDEA", "STATUS", "TITLE");
  size_t i, k;
  json_t *m, *idea;
  json_array_foreach(json_object_get(result, "missions"), i, m) {
    json_array_foreach(json_object_get(m, "ideas"), k, idea)
      printf("%-24s %-32s %-9s %s\n", str(m, "slug"), str(idea, "slug"), str(idea, "status"),
             str(idea, "title"));
  }
  part_left_out(result, "ideas", "ideaCount", true);
}

static int ideas_list(cli *c, int argc, char **argv) {
  return list_part(c, argc, argv, ideas_usage, show_ideas, "ideas", "ideaCount");
}

int cmd_ideas(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"create", ideas_create, NULL}, {"list", ideas_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, ideas_usage);
}

static const char works_usage[] =
    "usage: toolgate works create --slug S --mission S [--idea S] [--title T]\n"
    "       toolgate works list [--mission S] [--json]\n\n"
    "A work belongs to a mission, and to one of its ideas when it was derived from it.\n";

static int works_create(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"slug", "slug", false},
                                        {"mission", "missionSlug", false},
                                        {"idea", "ideaSlug", false},
                                        {"title", "title", false}};
  json_t *args = json_object();
  int r = cli_parse_options(argc, argv, works_usage, "works create", keys, 4, args, NULL, NULL);
  if (r == CLI_OK)
    r = require(args, works_usage, "works create", (const char *const[]){"slug", "missionSlug", NULL},
                (const char *const[]){"slug", "mission"});
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  return cli_operate(c, "work.work.create", args, true, NULL);
}

static void show_works(json_t *result) {
  printf("%-24s %-24s %-24s %s\n", "MISSION", "WORK", "IDEA", "TITLE");
  size_t i, k;
  json_t *m, *work;
  json_array_foreach(json_object_get(result, "missions"), i, m) {
    json_array_foreach(json_object_get(m, "works"), k, work)
      printf("%-24s %-24s %-24s %s\n", str(m, "slug"), str(work, "slug"), str(work, "idea"),
             str(work, "title"));
  }
  part_left_out(result, "works", "workCount", true);
}

static int works_list(cli *c, int argc, char **argv) {
  return list_part(c, argc, argv, works_usage, show_works, "works", "workCount");
}

int cmd_works(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"create", works_create, NULL}, {"list", works_list, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, works_usage);
}

static const char tasks_usage[] =
    "usage: toolgate tasks list [--status S] [--mission S] [--work S] [--agent SLUG] [--limit N]\n"
    "                           [--json]\n"
    "       toolgate tasks show SLUG [--json]\n"
    "       toolgate tasks assign SLUG (--agent SLUG | --user NAME) [--role assignee|reviewer|approver]\n"
    "       toolgate tasks approve SLUG (--user NAME | --agent SLUG)\n\n"
    "Agents create, comment on and move tasks with createTask, commentOnTask and transitionTask\n"
    "('toolgate call'). A task reaches done only when every approver has approved it.\n";

static void show_tasks(json_t *result) {
  printf("%-8s %-12s %-4s %-20s %s\n", "TASK", "STATUS", "PRIO", "SCOPE", "TITLE");
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(result, "tasks"), i, t) {
    const char *scope = json_string_value(json_object_get(t, "work"));
    const char *kind = "work:";
    if (!scope && (scope = json_string_value(json_object_get(t, "idea")))) kind = "idea:";
    if (!scope && (scope = json_string_value(json_object_get(t, "mission")))) kind = "mission:";
    char where[96];
    snprintf(where, sizeof where, "%s%s", scope ? kind : "tenant", scope ? scope : "");
    printf("%-8s %-12s %-4s %-20s %s\n", str(t, "slug"), str(t, "status"), str(t, "priority"),
           where, str(t, "title"));
  }
  cli_more_note(result);
}

static int tasks_list(cli *c, int argc, char **argv) {
  static const cli_option_key keys[] = {{"status", "status", false},
                                        {"mission", "missionSlug", false},
                                        {"work", "workSlug", false},
                                        {"agent", "assigneeAgentSlug", false},
                                        {"limit", "limit", true}};
  bool json = false;
  json_t *args = json_object();
  int r = cli_parse_options(argc, argv, tasks_usage, "tasks list", keys, 5, args, NULL, &json);
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  return cli_operate(c, "work.task.list", args, json, show_tasks);
}

static void show_task(json_t *result) {
  json_t *t = json_object_get(result, "task");
  printf("%s  %s  [%s, %s]\n", str(t, "slug"), str(t, "title"), str(t, "status"), str(t, "priority"));
  const char *description = json_string_value(json_object_get(t, "description"));
  if (description && *description) printf("\n%s\n", description);
  size_t i;
  json_t *v;
  if (json_array_size(json_object_get(result, "assignees"))) puts("\npeople:");
  json_array_foreach(json_object_get(result, "assignees"), i, v) {
    json_t *approved = json_object_get(v, "approvedAt");
    printf("  %-9s %s:%s%s%s\n", str(v, "role"), str(v, "type"), str(v, "name"),
           strcmp(str(v, "role"), "approver") != 0 ? ""
           : json_is_string(approved)              ? "  approved "
                                                   : "  (not approved yet)",
           json_is_string(approved) ? json_string_value(approved) : "");
  }
  json_array_foreach(json_object_get(result, "blockedBy"), i, v)
    printf("%s %s (%s)\n", i ? "           " : "\nblocked by:", str(v, "slug"), str(v, "status"));
  json_array_foreach(json_object_get(result, "blocks"), i, v)
    printf("%s %s (%s)\n", i ? "       " : "\nblocks:", str(v, "slug"), str(v, "status"));
  if (json_is_true(json_object_get(result, "blocksTruncated")))
    puts("        (and more tasks it blocks, not shown)");
  if (json_array_size(json_object_get(result, "chat"))) puts("\nchat:");
  if (json_is_true(json_object_get(result, "chatTruncated")))
    puts("  (older messages not shown: the newest are)");
  json_array_foreach(json_object_get(result, "chat"), i, v) {
    json_t *author = json_object_get(v, "author");
    printf("  %s %s:%s\n    %s\n", str(v, "createdAt"), str(author, "type"), str(author, "name"),
           str(v, "body"));
  }
}

static int tasks_show(cli *c, int argc, char **argv) {
  bool json = false;
  const char *slug = NULL;
  json_t *args = json_object();
  int r = cli_parse_options(argc, argv, tasks_usage, "tasks show", NULL, 0, args, &slug, &json);
  if (r == CLI_OK && !slug) r = cli_usage(tasks_usage, "tasks show: give one task SLUG");
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  json_object_set_new(args, "taskSlug", json_string(slug));
  return cli_operate(c, "work.task.show", args, json, show_task);
}

/* tasks assign and tasks approve: a task SLUG and one of --agent, --user. */
static int task_person(cli *c, int argc, char **argv, const char *tool, bool role) {
  static const cli_option_key keys[] = {{"agent", "agentSlug", false},
                                        {"user", "username", false},
                                        {"role", "role", false}};
  const char *slug = NULL;
  json_t *args = json_object();
  char command[16];
  snprintf(command, sizeof command, "tasks %s", argv[0]);
  int r =
      cli_parse_options(argc, argv, tasks_usage, command, keys, role ? 3 : 2, args, &slug, NULL);
  if (r == CLI_OK && (!slug || !json_object_get(args, "agentSlug") == !json_object_get(args, "username")))
    r = cli_usage(tasks_usage, "%s: give a task SLUG and exactly one of --agent, --user", command);
  if (r != CLI_OK) {
    json_decref(args);
    return r;
  }
  json_object_set_new(args, "taskSlug", json_string(slug));
  return cli_operate(c, tool, args, true, NULL);
}

static int tasks_assign(cli *c, int argc, char **argv) {
  return task_person(c, argc, argv, "work.task.assign", true);
}

static int tasks_approve(cli *c, int argc, char **argv) {
  return task_person(c, argc, argv, "work.task.approve", false);
}

int cmd_tasks(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"list", tasks_list, NULL},
                                     {"show", tasks_show, NULL},
                                     {"assign", tasks_assign, NULL},
                                     {"approve", tasks_approve, NULL}};
  return cli_dispatch(c, argc, argv, subs, 4, tasks_usage);
}
