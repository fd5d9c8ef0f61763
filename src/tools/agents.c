/* Provider "agents": editAgentFile and createSubAgent (seed 000 §3.4, §3.7), and the
 * operator's agent lifecycle. An agent's five files live in its scope's repository (a
 * mission's or an idea's agents in the mission repository, a work's in its data repository)
 * or, for a tenant-scope agent, in agent_files. contentHash covers the five. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/scope.h"
#include "domain/cron.h"
#include "tools/agent_rows.h"
#include "tools/lookup.h"
#include "tools/providers.h"
#include "tools/repo.h"
#include "tools/secrets.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

#define N_FILES 5
#define BODY_MAX 65536  /* bytes of one agent file */
#define SAMPLE_MAX 5120 /* characters of a new body kept in the activity row */
#define SUBAGENTS_MAX 32 /* sub-agents of one agent not archived */

static const char *const file_names[N_FILES] = {"SOUL.md", "AGENTS.md", "HEARTBEAT.md", "TOOLS.md",
                                                "agent.yml"};
/* Between consecutive bodies in the hash input (research/ever-works-semantics.md §3.3). */
static const char *const hash_labels[N_FILES - 1] = {"SOUL/AGENTS", "AGENTS/HEARTBEAT",
                                                     "HEARTBEAT/TOOLS", "TOOLS/AGENTYML"};

static void repo_releasep(tg_scope_repo *repo) { tg_repo_release(repo); }
#define _cleanup_repo_ __attribute__((cleanup(repo_releasep)))

typedef struct bodies {
  char *text[N_FILES];
  size_t len[N_FILES];
} bodies;

static void bodies_free(bodies *b) {
  for (int i = 0; i < N_FILES; i++) free(b->text[i]);
}
#define _cleanup_bodies_ __attribute__((cleanup(bodies_free)))

static int file_index(const char *name) {
  for (int i = 0; i < N_FILES; i++)
    if (strcmp(file_names[i], name) == 0) return i;
  return -1;
}

static int content_hash(const bodies *b, char out[65]) {
  size_t total = 0;
  for (int i = 0; i < N_FILES; i++) total += b->len[i] + (i ? strlen(hash_labels[i - 1]) + 2 : 0);
  char *buf = malloc(total + 1), *p = buf; /* + 1: sprintf ends with a NUL */
  if (!buf) return TG_E_NOMEM;
  for (int i = 0; i < N_FILES; i++) {
    if (i) p += sprintf(p, "\x01%s\x01", hash_labels[i - 1]);
    memcpy(p, b->text[i] ? b->text[i] : "", b->len[i]);
    p += b->len[i];
  }
  int r = tg_sha256_hex(buf, total, out);
  free(buf);
  return r;
}

/* Where an agent's files live: nowhere in git (tenant scope), or a repository and a folder. */
typedef struct home {
  bool git;
  const char *kind, *repo_name;
  char owner_id[TG_UUID_LEN + 1];
  char dir[160];
} home;

static int agent_home(tg_call_ctx *cx, const char *scope_type, const char *scope_id,
                      const char *slug, home *h) {
  *h = (home){0};
  if (!scope_id) return TG_OK;
  h->git = true;
  snprintf(h->dir, sizeof h->dir, ".works/agents/%s", slug);
  if (strcmp(scope_type, "work") == 0) {
    h->kind = "work";
    h->repo_name = "data";
    snprintf(h->owner_id, sizeof h->owner_id, "%s", scope_id);
    return TG_OK;
  }
  h->kind = h->repo_name = "mission";
  tg_scope_ref ref = {0};
  snprintf(strcmp(scope_type, "idea") == 0 ? ref.idea_id : ref.mission_id, TG_UUID_LEN + 1, "%s",
           scope_id);
  int r = tg_scope_resolve(cx->db, cx->principal->tenant_id, &ref);
  if (r < 0) return r;
  snprintf(h->owner_id, sizeof h->owner_id, "%s", ref.mission_id);
  if (*ref.idea_id) snprintf(h->dir, sizeof h->dir, ".works/ideas/%s/agents/%s", ref.idea_id, slug);
  return TG_OK;
}

/* The five bodies as stored now (a missing one is empty), from the tip of the repository's
 * default branch or from agent_files. */
static int read_bodies(tg_call_ctx *cx, const char *agent_id, const home *h, tg_scope_repo *repo,
                       const char *tip, bodies *b) {
  *b = (bodies){0};
  if (!h->git) {
    _cleanup_json_ json_t *rows = NULL;
    int r = tg_db_query(cx->db, "SELECT name, body FROM agent_files WHERE agent_id = $1",
                        json_pack("[s]", agent_id), &rows);
    if (r < 0) return r;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      int k = file_index(json_string_value(json_object_get(row, "name")));
      json_t *body = json_object_get(row, "body");
      if (k < 0 || b->text[k]) continue;
      if (!(b->text[k] = strndup(json_string_value(body), json_string_length(body)))) return TG_E_NOMEM;
      b->len[k] = json_string_length(body);
    }
    return TG_OK;
  }
  for (int i = 0; i < N_FILES; i++) {
    char path[200];
    snprintf(path, sizeof path, "%s/%s", h->dir, file_names[i]);
    int r = tg_git_read(repo->git, tip, path, BODY_MAX, &b->text[i], &b->len[i]);
    if (r == TG_E_NOTFOUND || r == TG_E_TOO_LARGE) {
      b->text[i] = NULL;
      b->len[i] = 0;
      continue;
    }
    if (r < 0) return r;
  }
  return TG_OK;
}

/* agent.yml must be one well-formed YAML stream. */
static int check_yaml(tg_call_ctx *cx, const char *text, size_t len) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return TG_E_NOMEM;
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  int r = TG_OK;
  for (bool done = false; !done;) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      r = tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                  json_pack("{s:s,s:s,s:I}", "reason", "yaml", "problem",
                            parser.problem ? parser.problem : "malformed", "line",
                            (json_int_t)parser.problem_mark.line + 1),
                  "agent.yml is not valid YAML: %s at line %zu.",
                  parser.problem ? parser.problem : "malformed", parser.problem_mark.line + 1);
      break;
    }
    done = event.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  return r;
}

/* An edit of the caller's files while another is still to be published (its call not
 * answered yet) is refused: built on it, its undo, should that one be given up, would restore
 * the hash of files that never were. */
static int edit_in_flight(tg_call_ctx *cx, tg_scope_repo *repo) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT id FROM repo_ref_moves WHERE repo_id = $1 AND principal_id = $2"
                          " AND tool = $3 AND applied_at IS NULL AND abandoned_at IS NULL LIMIT 1",
                          json_pack("[sss]", repo->id, cx->principal->id, cx->tool->name), &row);
  if (r < 0 || !row) return r;
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, json_pack("{s:s}", "reason", "edit_in_flight"),
                 "Another edit of your files is still being published; retry once it is answered.");
}

static int file_edit(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_principal *p = cx->principal; /* an agent: the tool is agents_only */
  const char *name = tg_json_str(args, "name");
  json_t *body_json = json_object_get(args, "body");
  const char *body = json_string_value(body_json);
  size_t len = json_string_length(body_json);
  if (len > BODY_MAX)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:I,s:i}", "reason", "too_large", "bytes", (json_int_t)len,
                             "maxBytes", BODY_MAX),
                   "The body holds %zu bytes; an agent file holds at most %d.", len, BODY_MAX);
  int r = tg_refuse_secret(cx, name, body, len);
  const char *message = tg_json_str(args, "commitMessage");
  if (r == TG_OK && message) r = tg_refuse_secret(cx, "commitMessage", message, strlen(message));
  if (r == TG_OK && strcmp(name, "agent.yml") == 0) r = check_yaml(cx, body, len);
  if (r < 0) return r;

  const char *agent_id = p->subject_id, *slug = p->name;
  home h;
  r = agent_home(cx, p->scope_type, p->scope_id, slug, &h);
  if (r < 0) return r;
  _cleanup_repo_ tg_scope_repo repo = {0};
  char tip[TG_GIT_SHA_LEN + 1] = "";
  if (h.git) {
    r = tg_repo_acquire(cx, h.kind, h.owner_id, h.repo_name, &repo);
    if (r == TG_OK) r = edit_in_flight(cx, &repo);
    if (r == TG_OK) r = tg_repo_tip(cx, &repo, repo.default_branch, tip);
    if (r < 0) return r;
  }
  /* Read once the repository is taken: taking it may give up an edit a crash left pending,
   * and take its hash back. */
  _cleanup_json_ json_t *agent = NULL;
  r = tg_db_query_row(cx->db, "SELECT id, slug, content_hash FROM agents WHERE id = $1",
                      json_pack("[s]", agent_id), &agent);
  if (r < 0) return r;
  if (!agent) return TG_E_NOTFOUND;
  const char *stored = json_string_value(json_object_get(agent, "content_hash"));
  const char *current = stored ? stored : "";
  const char *expected = tg_json_str(args, "expectedHash");
  if (expected && strcmp(expected, current) != 0)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s,s:s}", "reason", "hash_mismatch", "expectedHash", expected,
                             "currentHash", current),
                   "The agent's files changed since hash %.*s; the current hash is %s.",
                   TG_UTF8_CUT(expected, 64), current);
  _cleanup_bodies_ bodies b = {0};
  r = read_bodies(cx, agent_id, &h, &repo, tip, &b);
  if (r < 0) return r;
  int k = file_index(name);
  size_t old_len = b.len[k];
  bool existed = b.text[k] != NULL;
  /* An edit that changes nothing is refused, wherever the files are kept, as a commit that
   * changes nothing is. */
  if (existed && old_len == len && memcmp(b.text[k], body, len) == 0)
    return tg_fail(
        cx, TG_ERR_PRECONDITION_FAILED,
        json_pack("{s:s,s:s,s:s}", "reason", "no_change", "name", name, "currentHash", current),
        "%s already holds this text: there is nothing to edit.", name);
  free(b.text[k]);
  if (!(b.text[k] = strndup(body, len))) return TG_E_NOMEM;
  b.len[k] = len;
  char new_hash[65], now[TG_ISO_LEN + 1];
  r = content_hash(&b, new_hash);
  if (r < 0) return r;
  tg_now_iso(now);

  tg_repo_move move = {0};
  if (h.git) {
    char path[200];
    snprintf(path, sizeof path, "%s/%s", h.dir, name);
    tg_git_change change = {.path = path, .content = body, .len = len,
                            .mode = existed ? TG_GIT_MODIFY : TG_GIT_ADD};
    _cleanup_free_ char *default_message = NULL;
    if (!message) {
      if (asprintf(&default_message, "chore(agent/%s): self-edit", slug) < 0) return TG_E_NOMEM;
      message = default_message;
    }
    r = tg_repo_prepare(cx, &repo, repo.default_branch, false, &change, 1, message, &move);
  } else {
    r = tg_db_exec(cx->db,
                   "INSERT INTO agent_files (agent_id, name, body, updated_at) VALUES ($1, $2, $3, $4)"
                   " ON CONFLICT (agent_id, name) DO UPDATE SET body = excluded.body,"
                   " updated_at = excluded.updated_at",
                   json_pack("[sss%s]", agent_id, name, body, len, now), NULL);
  }
  if (r == TG_OK)
    r = tg_db_exec(cx->db, "UPDATE agents SET content_hash = $1, updated_at = $2 WHERE id = $3",
                   json_pack("[sss]", new_hash, now, agent_id), NULL);
  if (r < 0) return r;

  char summary[160];
  snprintf(summary, sizeof summary, "Edited %s for agent %s", name, slug);
  json_t *details = json_pack(
      "{s:s,s:s,s:s,s:s,s:s?,s:s,s:{s:I,s:I,s:s%}}", "agentId", agent_id, "name", name, "prevHash",
      current, "newHash", new_hash, "runId", cx->run_id, "storage", h.git ? "git" : "db", "diff",
      "addedChars", (json_int_t)(len > old_len ? len - old_len : 0), "removedChars",
      (json_int_t)(old_len > len ? old_len - len : 0), "sample", body,
      len < SAMPLE_MAX ? len : (size_t)SAMPLE_MAX);
  if (details && h.git) {
    json_object_set_new(details, "repo", json_string(repo.label));
    json_object_set_new(details, "sha", json_string(move.new_sha));
  }
  r = tg_activity(cx, "AGENT_FILE_EDITED", NULL, summary, details);
  if (r == TG_OK && h.git)
    r = tg_repo_publish(cx, &repo, &move,
                        "UPDATE agents SET content_hash = $1 WHERE id = $2 AND content_hash = $3",
                        json_pack("[s?ss]", stored, agent_id, new_hash));
  if (r < 0) return r;
  *ret = json_pack("{s:s}", "newHash", new_hash);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The slug of a name: lower case, runs of anything but letters and digits become one '-',
 * at most 63 bytes, no '-' at either end. Empty when nothing is left. */
static void slugify(const char *name, char out[64]) {
  size_t o = 0;
  bool dash = false;
  for (const unsigned char *p = (const unsigned char *)name; *p && o < 63; p++) {
    if (isalnum(*p) && *p < 0x80) {
      if (dash && o) out[o++] = '-';
      if (o < 63) out[o++] = (char)tolower(*p);
      dash = false;
    } else {
      dash = true;
    }
  }
  while (o && out[o - 1] == '-') o--;
  out[o] = '\0';
}

/* The child's scope (id of a mission, idea or work, or none) as the caller asked for it. */
static int child_scope(tg_call_ctx *cx, const char *scope, const char *target,
                       tg_scope_ref *ref, char scope_id[TG_UUID_LEN + 1]) {
  *ref = (tg_scope_ref){0};
  *scope_id = '\0';
  if (strcmp(scope, "tenant") == 0 && target) /* seed 000: null for tenant */
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s}", "reason", "target_for_tenant", "scope", scope),
                   "A tenant-scoped sub-agent names no targetId.");
  if (strcmp(scope, "tenant") == 0) return TG_OK;
  size_t t = strcmp(scope, "mission") == 0 ? 0 : strcmp(scope, "idea") == 0 ? 1 : 2;
  char *slot = t == 0 ? ref->mission_id : t == 1 ? ref->idea_id : ref->work_id;
  if (target) {
    int r = tg_lookup_scope_id(cx, scope, target,
                               json_pack("{s:s,s:s}", "scope", scope, "targetId", target), slot);
    if (r < 0) return r;
  } else {
    tg_scope_ref own;
    int r = tg_scope_of(cx->db, cx->principal, &own);
    if (r < 0) return r;
    const char *mine = t == 0 ? own.mission_id : t == 1 ? own.idea_id : own.work_id;
    if (!*mine)
      return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                     json_pack("{s:s,s:s}", "reason", "target_needed", "scope", scope),
                     "The caller has no %s of its own: name one with targetId.", scope);
    snprintf(slot, TG_UUID_LEN + 1, "%s", mine);
  }
  snprintf(scope_id, TG_UUID_LEN + 1, "%s", slot);
  return tg_scope_resolve(cx->db, cx->principal->tenant_id, ref);
}

/* A YAML double-quoted scalar of text (JSON's string syntax is a subset of it). */
static char *yaml_quote(const char *text) {
  json_t *s = json_string(text ? text : "");
  char *out = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
  json_decref(s);
  return out;
}

static int scaffold(const char *slug, const char *name, const char *title, const char *capabilities,
                    const char *scope, const char *cadence, const char *model, bodies *b) {
  *b = (bodies){0};
  _cleanup_free_ char *q_slug = yaml_quote(slug), *q_name = yaml_quote(name),
                      *q_title = yaml_quote(title), *q_cadence = yaml_quote(cadence),
                      *q_model = yaml_quote(model);
  if (!q_slug || !q_name || !q_title || !q_cadence || !q_model) return TG_E_NOMEM;
  int n[N_FILES];
  n[0] = asprintf(&b->text[0], "# %s\n\n%s\n", name, title && *title ? title : "A sub-agent.");
  n[1] = asprintf(&b->text[1], "# Capabilities\n\n%s\n", capabilities);
  n[2] = asprintf(&b->text[2], "# Heartbeat\n\nCadence: %s (UTC).\n", cadence);
  n[3] = asprintf(&b->text[3],
                  "# Tools\n\nThis agent starts with every permission off; a person grants what it "
                  "needs.\n");
  n[4] = asprintf(&b->text[4],
                  "slug: %s\nname: %s\ntitle: %s\nscope: %s\nheartbeatCadence: %s\nmodel: %s\n",
                  q_slug, q_name, q_title, scope, q_cadence, q_model);
  int r = TG_OK;
  for (int i = 0; i < N_FILES; i++) {
    if (n[i] < 0) {
      b->text[i] = NULL; /* asprintf leaves it undefined on failure */
      r = TG_E_NOMEM;
      continue;
    }
    b->len[i] = (size_t)n[i];
  }
  return r;
}

static int subagent_create(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_principal *p = cx->principal;
  json_t *asked = json_object_get(args, "permissions");
  _cleanup_json_ json_t *on = json_array();
  if (!on) return TG_E_NOMEM;
  const char *flag;
  json_t *v;
  json_object_foreach(asked, flag, v) {
    if (json_is_true(v)) json_array_append_new(on, json_string(flag));
  }
  if (json_array_size(on))
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                   json_pack("{s:s,s:O}", "reason", "child_permissions", "flags", on),
                   "A sub-agent starts with every permission off; a person grants them.");

  const char *creator = p->kind == TG_PRINCIPAL_AGENT ? p->subject_id : NULL;
  if (creator) {
    _cleanup_json_ json_t *held = NULL;
    int r = tg_db_query_row(cx->db,
                            "SELECT COUNT(*) AS n FROM agents WHERE created_by_agent_id = $1"
                            " AND status <> 'archived'",
                            json_pack("[s]", creator), &held);
    if (r < 0) return r;
    if (json_integer_value(json_object_get(held, "n")) >= SUBAGENTS_MAX)
      return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                     json_pack("{s:s,s:i}", "reason", "too_many_subagents", "max", SUBAGENTS_MAX),
                     "An agent holds at most %d sub-agents not archived; a person archives one "
                     "to make room.",
                     SUBAGENTS_MAX);
  }

  const char *cadence = tg_json_str(args, "heartbeatCadence");
  const char *why = tg_cadence_check(cadence, tg_now_ms());
  if (why)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s}", "reason", "cadence", "why", why),
                   "heartbeatCadence is not valid: %s.", why);
  bool manual = tg_cadence_manual(cadence);

  const char *scope = tg_json_str(args, "scope");
  tg_scope_ref ref;
  char scope_id[TG_UUID_LEN + 1];
  int r = child_scope(cx, scope, tg_json_str(args, "targetId"), &ref, scope_id);
  if (r < 0) return r;
  /* The cascade: a tenant caller creates anywhere; any other creates inside its own scope
   * (which tg_scope_reaches decides) and never wider (a tenant child has no scope ids). */
  bool allowed = !p->scope_id || (*scope_id && tg_scope_reaches(p, &ref));
  if (!allowed)
    return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                   json_pack("{s:s,s:s,s:s}", "reason", "scope_cascade", "callerScope",
                             p->scope_type, "childScope", scope),
                   "A %s agent may not create a %s agent there: sub-agents stay in the caller's "
                   "scope or narrower.",
                   p->scope_type, scope);

  const char *name = tg_json_str(args, "name"), *title = tg_json_str(args, "title");
  const char *capabilities = tg_json_str(args, "capabilities");
  char slug[64];
  slugify(name, slug);
  if (!*slug)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED, json_pack("{s:s}", "reason", "bad_name"),
                   "The name needs at least one ASCII letter or digit to make a slug.");
  r = tg_refuse_secret(cx, "name", name, strlen(name));
  if (r == TG_OK && title) r = tg_refuse_secret(cx, "title", title, strlen(title));
  if (r == TG_OK) r = tg_refuse_secret(cx, "capabilities", capabilities, strlen(capabilities));
  if (r < 0) return r;
  _cleanup_bodies_ bodies b = {0};
  r = scaffold(slug, name, title, capabilities, scope, manual ? "manual" : cadence,
               tg_json_str(args, "modelId"), &b);
  char hash[65];
  if (r == TG_OK) r = content_hash(&b, hash);
  if (r < 0) return r;

  char agent_id[TG_UUID_LEN + 1], principal_id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  tg_new_agent agent = {.slug = slug, .name = name, .status = "draft", .scope_type = scope,
                        .scope_id = *scope_id ? scope_id : NULL, .content_hash = hash,
                        .created_by_agent_id = creator, .title = title,
                        .capabilities = capabilities,
                        .ai_provider_id = tg_json_str(args, "aiProviderId"),
                        .model_id = tg_json_str(args, "modelId"),
                        .heartbeat_cadence = manual ? NULL : cadence};
  r = tg_agent_insert(cx, &agent, agent_id, principal_id);
  if (r < 0) return r;

  home h;
  r = agent_home(cx, scope, *scope_id ? scope_id : NULL, slug, &h);
  if (r < 0) return r;
  _cleanup_repo_ tg_scope_repo repo = {0};
  tg_repo_move move = {0};
  if (h.git) {
    char paths[N_FILES][200];
    tg_git_change changes[N_FILES];
    for (int i = 0; i < N_FILES; i++) {
      snprintf(paths[i], sizeof paths[i], "%s/%s", h.dir, file_names[i]);
      changes[i] = (tg_git_change){.path = paths[i], .content = b.text[i], .len = b.len[i],
                                   .mode = TG_GIT_ADD};
    }
    char message[120];
    snprintf(message, sizeof message, "chore(agent/%s): scaffold", slug);
    r = tg_repo_acquire(cx, h.kind, h.owner_id, h.repo_name, &repo);
    if (r == TG_OK)
      r = tg_repo_prepare(cx, &repo, repo.default_branch, false, changes, N_FILES, message, &move);
  } else {
    for (int i = 0; r == TG_OK && i < N_FILES; i++)
      r = tg_db_exec(cx->db,
                     "INSERT INTO agent_files (agent_id, name, body, updated_at) VALUES ($1, $2, $3, $4)",
                     json_pack("[sss%s]", agent_id, file_names[i], b.text[i], b.len[i], now), NULL);
  }
  if (r < 0) return r;

  json_t *activity_scope = json_object();
  if (!activity_scope) return TG_E_NOMEM;
  if (*ref.mission_id) json_object_set_new(activity_scope, "missionId", json_string(ref.mission_id));
  if (*ref.idea_id) json_object_set_new(activity_scope, "ideaId", json_string(ref.idea_id));
  if (*ref.work_id) json_object_set_new(activity_scope, "workId", json_string(ref.work_id));
  char summary[160];
  snprintf(summary, sizeof summary, "Sub-agent %s created (draft)", slug);
  json_t *details = json_pack("{s:s,s:s,s:s,s:s,s:s?,s:s,s:s}", "agentId", agent_id, "slug", slug,
                              "scope", scope, "status", "draft", "createdByAgentId", creator,
                              "heartbeatCadence", manual ? "manual" : cadence, "contentHash", hash);
  r = tg_activity(cx, "AGENT_CREATED", activity_scope, summary, details);
  json_decref(activity_scope);
  if (r == TG_OK && h.git) /* without its files the draft cannot start: archive it */
    r = tg_repo_publish(cx, &repo, &move,
                        "UPDATE agents SET status = 'archived', content_hash = NULL,"
                        " updated_at = $2 WHERE id = $1",
                        json_pack("[ss]", agent_id, now));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s}", "agentId", agent_id, "slug", slug);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* The operator's lifecycle moves (research/ever-works-semantics.md §5.4): each names the
 * statuses it leaves from, the one it lands on, and the activity it writes. */
typedef struct lifecycle {
  const char *from[3];
  const char *to;
  const char *action[3]; /* per from */
} lifecycle;

static const lifecycle start_move = {{"draft", "paused"}, "active", {"AGENT_STARTED", "AGENT_RESUMED"}};
static const lifecycle pause_move = {{"active"}, "paused", {"AGENT_PAUSED"}};
static const lifecycle archive_move = {{"draft", "active", "paused"}, "archived",
                                       {"AGENT_ARCHIVED", "AGENT_ARCHIVED", "AGENT_ARCHIVED"}};
static const lifecycle unarchive_move = {{"archived"}, "paused", {"AGENT_UNARCHIVED"}};

static int lifecycle_move(tg_call_ctx *cx, json_t *args, json_t **ret, const lifecycle *m) {
  const char *slug = tg_json_str(args, "agentSlug");
  _cleanup_json_ json_t *agent = NULL;
  int r = tg_lookup_agent(cx, slug, &agent);
  if (r < 0) return r;
  const char *status = json_string_value(json_object_get(agent, "status"));
  int k = -1;
  json_t *allowed = json_array();
  if (!allowed) return TG_E_NOMEM;
  for (int i = 0; i < 3 && m->from[i]; i++) {
    json_array_append_new(allowed, json_string(m->from[i]));
    if (strcmp(m->from[i], status) == 0) k = i;
  }
  if (k < 0)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED,
                   json_pack("{s:s,s:s,s:s,s:o}", "reason", "bad_transition", "status", status,
                             "to", m->to, "allowedFrom", allowed),
                   "Agent %s is %s; it cannot become %s from there.", slug, status, m->to);
  json_decref(allowed);
  char now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  int64_t changes = 0;
  r = tg_db_exec(cx->db,
                 "UPDATE agents SET status = $1, updated_at = $2 WHERE id = $3 AND status = $4",
                 json_pack("[ssOs]", m->to, now, json_object_get(agent, "id"), status), &changes);
  if (r < 0) return r;
  if (changes != 1)
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, json_pack("{s:s}", "reason", "concurrent_change"),
                   "Agent %s changed status meanwhile; retry.", slug);
  /* An agent that stops acting gives up the runs queued for it while it was active: none may
   * wake it later; a person's start makes it join the next ones. */
  int64_t withdrawn = 0;
  if (strcmp(m->to, "active") != 0)
    r = tg_db_exec(cx->db, "DELETE FROM jobs WHERE agent_id = $1 AND status = 'queued'",
                   json_pack("[O]", json_object_get(agent, "id")), &withdrawn);
  if (r < 0) return r;
  char summary[160];
  snprintf(summary, sizeof summary, "Agent %s %s → %s", slug, status, m->to);
  json_t *details = json_pack("{s:O,s:s,s:s}", "agentId", json_object_get(agent, "id"), "from",
                              status, "to", m->to);
  if (details && withdrawn)
    json_object_set_new(details, "jobsWithdrawn", json_integer((json_int_t)withdrawn));
  r = tg_activity(cx, m->action[k], NULL, summary, details);
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:s}", "agentSlug", slug, "status", m->to, "previousStatus", status);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int agent_start(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return lifecycle_move(cx, args, ret, &start_move);
}
static int agent_pause(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return lifecycle_move(cx, args, ret, &pause_move);
}
static int agent_archive(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return lifecycle_move(cx, args, ret, &archive_move);
}
static int agent_unarchive(tg_call_ctx *cx, json_t *args, json_t **ret) {
  return lifecycle_move(cx, args, ret, &unarchive_move);
}

static const tg_handler_entry handlers[] = {
    {"agent.file.edit", file_edit},         {"agent.subagent.create", subagent_create},
    {"admin.agent.start", agent_start},     {"admin.agent.pause", agent_pause},
    {"admin.agent.archive", agent_archive}, {"admin.agent.unarchive", agent_unarchive},
};

const tg_provider tg_provider_agents = {
    .name = "agents",
    .spec_file = "agents.json",
    .handlers = handlers,
    .n_handlers = sizeof handlers / sizeof handlers[0],
};
