/* Provider "knowledge": the read tools of seed 000 §3.8-3.11 (activity, mission state, KB
 * documents, skill bodies) with seed 001's skill list, and the operator's tools that fill the
 * knowledge base and the skill catalog.
 *
 * Reach: a read outside the caller's scope answers not_found exactly like a missing row, so a
 * probe learns nothing (DESIGN.md §5); a write outside it answers permission_denied. Reads
 * filter by reach in SQL, from the one id a scoped agent carries (its mission, idea or work),
 * so limits and counts only ever see rows the caller may see. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/call.h"
#include "core/scope.h"
#include "domain/skill_file.h"
#include "tools/providers.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

#define ACTIVITY_LIMIT_DEFAULT 20
#define ACTIVITY_WINDOW_MS (24LL * 60 * 60 * 1000) /* seed 000 §3.8: the last 24 hours */
#define KB_CANDIDATES_MAX 20 /* works listed when a slug is ambiguous */
#define LIST_LIMIT_DEFAULT 100
#define SKILLS_ACTIVE_MAX 200 /* skills agent.skill.list returns */
#define SUMMARY_MAX 200
#define BINDINGS_MAX 32 /* skill.catalog.add: the input schema's maxItems */

static json_int_t arg_int(json_t *args, const char *key, json_int_t fallback) {
  json_t *v = json_object_get(args, key);
  return v ? json_integer_value(v) : fallback;
}

static const char *nonempty(const char *s) { return s && *s ? s : NULL; }

/* The one id a reach filter compares: a mission, idea or work agent sets the matching one; a
 * tenant caller (every user) none. The SQL of each read holds
 *   ($m IS NULL OR <row's mission> = $m) AND ($i IS NULL OR <row's idea> = $i)
 *   AND ($w IS NULL OR <row's work> = $w)
 * with the row's parents resolved by joins where the row does not carry them. */
typedef struct reach {
  const char *mission, *idea, *work;
} reach;

static reach reach_of(const tg_principal *p) {
  reach r = {0};
  if (!p->scope_id) return r;
  if (strcmp(p->scope_type, "mission") == 0) r.mission = p->scope_id;
  else if (strcmp(p->scope_type, "idea") == 0) r.idea = p->scope_id;
  else r.work = p->scope_id;
  return r;
}

/* A tool-level validation failure shaped like the argument gate's, for rules a JSON Schema
 * cannot state. */
static int invalid_argument(tg_call_ctx *cx, const char *pointer, const char *keyword,
                            const char *message) {
  return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                 json_pack("{s:[{s:s,s:s,s:s}]}", "violations", "instancePath", pointer, "keyword",
                           keyword, "message", message),
                 "Invalid arguments: %s: %s", pointer, message);
}

/* ---- work.activity.list ---------------------------------------------------------------- */

/* An RFC 3339 date-time (the input schema has checked its shape) as ms since the epoch.
 * false when a field is out of range, such as 2026-02-30 or 24:00. */
static bool parse_datetime(const char *s, int64_t *ret) {
  int y, mo, d, h, mi, sec, n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || n != 19)
    return false;
  const char *p = s + n;
  int64_t ms = 0;
  if (*p == '.') {
    int digits = 0;
    for (p++; isdigit((unsigned char)*p); p++, digits++)
      if (digits < 3) ms = ms * 10 + (*p - '0');
    if (digits == 0) return false;
    for (; digits < 3; digits++) ms *= 10;
  }
  int offset_min = 0;
  if (*p == '+' || *p == '-') {
    int oh, om, k = 0;
    if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5 || oh > 23 || om > 59) return false;
    offset_min = (*p == '-' ? -1 : 1) * (oh * 60 + om);
    p += 1 + k;
  } else if (*p == 'Z') {
    p++;
  } else {
    return false;
  }
  static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (*p || mo < 1 || mo > 12 || d < 1 || d > month_days[mo - 1] + (mo == 2 && leap) || h > 23 ||
      mi > 59 || sec > 60) /* 60: a leap second */
    return false;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                  .tm_min = mi, .tm_sec = sec};
  *ret = ((int64_t)timegm(&tm) - offset_min * 60LL) * 1000 + ms;
  return true;
}

static int activity_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  char since[TG_ISO_LEN + 1];
  const char *since_arg = tg_json_str(args, "since");
  if (since_arg) {
    int64_t ms;
    if (!parse_datetime(since_arg, &ms))
      return invalid_argument(cx, "/since", "format", "not a valid date-time");
    /* Stored timestamps are UTC text with milliseconds, so the bound must be too to compare;
     * anything before the epoch means "from the start". */
    tg_iso8601(ms < 0 ? 0 : ms, since);
  } else {
    tg_iso8601(tg_now_ms() - ACTIVITY_WINDOW_MS, since);
  }
  json_int_t limit = arg_int(args, "limit", ACTIVITY_LIMIT_DEFAULT);
  reach rc = reach_of(cx->principal);
  json_t *params = json_pack("[sss?s?s?I]", cx->principal->tenant_id, since, rc.mission, rc.idea,
                             rc.work, limit + 1);
  if (!params) return TG_E_NOMEM;

  /* The type filter is an IN list of at most maxItems parameters, which both backends take. */
  char type_filter[32 * 8 + 40] = "";
  json_t *types = json_object_get(args, "types");
  if (json_array_size(types) > 0) {
    size_t used = (size_t)snprintf(type_filter, sizeof type_filter, " AND a.action_type IN (");
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
      _cleanup_free_ char *upper = strdup(json_string_value(t));
      if (!upper) {
        json_decref(params);
        return TG_E_NOMEM;
      }
      for (char *c = upper; *c; c++) *c = (char)toupper((unsigned char)*c);
      json_array_append_new(params, json_string(upper));
      used += (size_t)snprintf(type_filter + used, sizeof type_filter - used, "%s$%zu",
                               i ? ", " : "", json_array_size(params));
    }
    snprintf(type_filter + used, sizeof type_filter - used, ")");
  }
  /* Rows written for an idea or a work may carry only that id: their mission and idea come
   * from the idea and work rows. */
  _cleanup_free_ char *sql = NULL;
  if (asprintf(&sql,
               "SELECT a.id, a.action_type, a.created_at, a.summary, a.details"
               " FROM activity_log a"
               " LEFT JOIN works w ON w.id = a.work_id"
               " LEFT JOIN ideas i ON i.id = a.idea_id"
               " WHERE a.tenant_id = $1 AND a.created_at >= $2"
               " AND ($3 IS NULL OR COALESCE(a.mission_id, w.mission_id, i.mission_id) = $3)"
               " AND ($4 IS NULL OR COALESCE(a.idea_id, w.idea_id) = $4)"
               " AND ($5 IS NULL OR a.work_id = $5)%s"
               " ORDER BY a.created_at DESC, a.id DESC LIMIT $6",
               type_filter) < 0) {
    json_decref(params);
    return TG_E_NOMEM;
  }
  _cleanup_json_ json_t *found = NULL;
  int r = tg_db_query(cx->db, sql, params, &found);
  if (r < 0) return r;
  bool truncated = tg_json_cut(found, limit);
  json_t *rows = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(found, i, row) {
    json_t *out = json_pack("{s:O,s:O,s:O,s:O}", "id", json_object_get(row, "id"), "actionType",
                            json_object_get(row, "action_type"), "createdAt",
                            json_object_get(row, "created_at"), "summary",
                            json_object_get(row, "summary"));
    const char *text = json_string_value(json_object_get(row, "details"));
    json_t *details = text ? json_loads(text, 0, NULL) : NULL;
    if (json_is_object(details)) json_object_set(out, "details", details);
    json_decref(details);
    json_array_append_new(rows, out);
  }
  *ret = json_pack("{s:o,s:b}", "rows", rows, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* ---- work.mission.state ---------------------------------------------------------------- */

static int mission_state(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *key = tg_json_str(args, "missionSlugOrId");
  _cleanup_json_ json_t *mission = NULL;
  int r = tg_db_query_row(cx->db,
                          "SELECT id, title, description, status, current_spend_cents, cap_cents,"
                          " period_end FROM missions"
                          " WHERE tenant_id = $1 AND (id = $2 OR slug = $2)",
                          json_pack("[ss]", cx->principal->tenant_id, key), &mission);
  if (r < 0) return r;
  tg_scope_ref ref = {0};
  if (mission)
    snprintf(ref.mission_id, sizeof ref.mission_id, "%s",
             json_string_value(json_object_get(mission, "id")));
  /* Out of reach answers exactly like missing: the same code, message and details. */
  if (!mission || !tg_scope_reaches(cx->principal, &ref))
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "missionSlugOrId", key),
                   "No mission %.*s.", TG_UTF8_CUT(key, 64));

  _cleanup_json_ json_t *counts = NULL, *works = NULL;
  r = tg_db_query(cx->db,
                  "SELECT status, COUNT(*) AS n FROM ideas WHERE mission_id = $1 GROUP BY status",
                  json_pack("[s]", ref.mission_id), &counts);
  if (r == TG_OK)
    r = tg_db_query_row(cx->db, "SELECT COUNT(*) AS n FROM works WHERE mission_id = $1",
                        json_pack("[s]", ref.mission_id), &works);
  if (r < 0) return r;
  /* Every status of the ideas table, zeros included, so the shape never varies. */
  json_t *ideas = json_pack("{s:i,s:i,s:i,s:i,s:i}", "open", 0, "queued", 0, "building", 0,
                            "done", 0, "failed", 0);
  size_t i;
  json_t *row;
  json_array_foreach(counts, i, row) {
    const char *status = json_string_value(json_object_get(row, "status"));
    if (json_object_get(ideas, status)) json_object_set(ideas, status, json_object_get(row, "n"));
  }
  *ret = json_pack("{s:O,s:O,s:O,s:O,s:o,s:O,s:{s:O,s:O,s:O}}", "id",
                   json_object_get(mission, "id"), "title", json_object_get(mission, "title"),
                   "description", json_object_get(mission, "description"), "status",
                   json_object_get(mission, "status"), "ideas", ideas, "worksCount",
                   json_object_get(works, "n"), "spend", "currentSpendCents",
                   json_object_get(mission, "current_spend_cents"), "capCents",
                   json_object_get(mission, "cap_cents"), "periodEnd",
                   json_object_get(mission, "period_end"));
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* ---- kb.document.get ------------------------------------------------------------------- */

/* Text that must not act inside KB content: our own fence tag, which would let a document
 * close its fence and speak outside it, and the control markers of chat templates. Each is
 * defused where it starts by a zero-width space after its first character. Nothing is taken
 * out, so no two pieces can be joined into a new one: every marker in the output would have
 * stood at the same place in the input, and got its space there. */
static const char *const defused[] = {"<kb-document", "</kb-document", "[INST]",    "[/INST]",
                                      "<|im_start|>", "<|im_end|>",    "<|system|>"};

static bool starts_defused(const char *p, const char *end) {
  for (size_t k = 0; k < sizeof defused / sizeof *defused; k++) {
    size_t len = strlen(defused[k]);
    if ((size_t)(end - p) >= len && strncasecmp(p, defused[k], len) == 0) return true;
  }
  return false;
}

static void defuse_into(FILE *out, const char *text, size_t len) {
  for (const char *p = text, *end = text + len; p < end; p++) {
    fputc(*p, out);
    if ((*p == '<' || *p == '[') && starts_defused(p, end)) fputs("\xe2\x80\x8b", out); /* U+200B */
  }
}

/* KB text as user content for a model: defused, and with fence wrapped in the tag that frames
 * it as reference material (security §3 of the design seed 000 refers to). */
static json_t *user_content(const char *slug, const char *text, size_t len, bool fence) {
  char *buf = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&buf, &size);
  if (!out) return NULL;
  if (fence)
    fprintf(out, "<kb-document slug=\"%s\" trust=\"user-content\" frame=\"reference-only\">\n",
            slug);
  defuse_into(out, text, len);
  if (fence) fputs(len > 0 && text[len - 1] == '\n' ? "</kb-document>" : "\n</kb-document>", out);
  bool ok = !ferror(out);
  if (fclose(out) != 0) ok = false;
  json_t *s = ok ? json_stringn(buf, size) : NULL;
  free(buf);
  return s;
}

static int kb_get(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "slug"), *work = tg_json_str(args, "workId");
  reach rc = reach_of(cx->principal);
  _cleanup_json_ json_t *matches = NULL;
  int r = tg_db_query(
      cx->db,
      "SELECT d.id, d.title, d.work_id, w.slug AS work_slug FROM kb_documents d"
      " JOIN works w ON w.id = d.work_id"
      " WHERE d.tenant_id = $1 AND d.slug = $2"
      " AND ($3 IS NULL OR d.mission_id = $3) AND ($4 IS NULL OR w.idea_id = $4)"
      " AND ($5 IS NULL OR d.work_id = $5) AND ($6 IS NULL OR w.id = $6 OR w.slug = $6)"
      " ORDER BY w.slug LIMIT $7",
      json_pack("[sss?s?s?s?i]", cx->principal->tenant_id, slug, rc.mission, rc.idea, rc.work,
                work, KB_CANDIDATES_MAX + 1),
      &matches);
  if (r < 0) return r;
  if (json_array_size(matches) == 0)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s,s:s?}", "slug", slug, "workId", work),
                   "No knowledge-base document %s%s%.*s.", slug, work ? " in work " : "",
                   TG_UTF8_CUT(work ? work : "", 64));
  if (json_array_size(matches) > 1) {
    /* Only works the caller reaches were selected, so the list reveals nothing new. */
    json_t *candidates = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(matches, i, m) {
      if (i == KB_CANDIDATES_MAX) break;
      json_array_append_new(candidates,
                            json_pack("{s:O,s:O,s:O}", "workId", json_object_get(m, "work_id"),
                                      "workSlug", json_object_get(m, "work_slug"), "title",
                                      json_object_get(m, "title")));
    }
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:o,s:b}", "slug", slug, "candidates", candidates,
                             "candidatesTruncated", json_array_size(matches) > KB_CANDIDATES_MAX),
                   "Several works hold a document %s: name one with workId.", slug);
  }
  json_t *match = json_array_get(matches, 0);
  _cleanup_json_ json_t *doc = NULL;
  r = tg_db_query_row(cx->db, "SELECT title, body, updated_at FROM kb_documents WHERE id = $1",
                      json_pack("[O]", json_object_get(match, "id")), &doc);
  if (r < 0) return r;
  if (!doc) return TG_E_NOTFOUND; /* selected a moment ago in the same transaction */
  json_t *title = json_object_get(doc, "title"), *body = json_object_get(doc, "body");
  *ret = json_pack("{s:O,s:o,s:o,s:O,s:s}", "id", json_object_get(match, "id"), "title",
                   user_content(slug, json_string_value(title), json_string_length(title), false),
                   "body",
                   user_content(slug, json_string_value(body), json_string_length(body), true),
                   "updatedAt", json_object_get(doc, "updated_at"), "trust", "user-content");
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* ---- agent.skill.list, agent.skill.load ------------------------------------------------ */

/* The active set: skills bound to the tenant, to the caller's mission (its own, or the
 * mission of its idea or work), to its work, or to the caller itself. $5 narrows it to one
 * slug. Slugs are unique per tenant, so a skill bound at several levels appears once. */
#define ACTIVE_SET_WHERE                                                                     \
  " FROM skills s WHERE s.tenant_id = $1 AND ($5 IS NULL OR s.slug = $5) AND EXISTS ("       \
  "SELECT 1 FROM skill_bindings b WHERE b.skill_id = s.id AND (b.level = 'tenant'"           \
  " OR (b.level = 'mission' AND b.target_id = $2) OR (b.level = 'work' AND b.target_id = $3)" \
  " OR (b.level = 'agent' AND b.target_id = $4)))"

static int active_skills(tg_call_ctx *cx, const tg_scope_ref *chain, const char *columns,
                         const char *slug, json_int_t limit, json_t **ret) {
  const tg_principal *p = cx->principal;
  _cleanup_free_ char *sql = NULL;
  if (asprintf(&sql, "SELECT %s" ACTIVE_SET_WHERE " ORDER BY s.slug LIMIT $6", columns) < 0)
    return TG_E_NOMEM;
  return tg_db_query(cx->db, sql,
                     json_pack("[ss?s?s?s?I]", p->tenant_id, nonempty(chain->mission_id),
                               nonempty(chain->work_id),
                               p->kind == TG_PRINCIPAL_AGENT ? p->subject_id : NULL, slug, limit),
                     ret);
}

static int skill_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  tg_scope_ref chain;
  json_t *skills = NULL;
  int r = tg_scope_of(cx->db, cx->principal, &chain);
  if (r == TG_OK)
    r = active_skills(cx, &chain, "s.slug, s.name, s.description", NULL, SKILLS_ACTIVE_MAX + 1,
                      &skills);
  if (r < 0) return r;
  bool truncated = tg_json_cut(skills, SKILLS_ACTIVE_MAX);
  *ret = json_pack("{s:o,s:b}", "skills", skills, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* Stored tool names are canonical; the caller gets them as its own tool list names them
 * (model-facing, or seed-000 aliases under the catalog profile), leaving out tools it
 * cannot be offered under that profile or that are no longer in the catalog. */
static json_t *tools_as_seen(tg_call_ctx *cx, const char *stored) {
  _cleanup_json_ json_t *names = json_loads(stored ? stored : "[]", 0, NULL);
  json_t *out = json_array();
  size_t i;
  json_t *n;
  json_array_foreach(names, i, n) {
    const tg_tool *t = tg_registry_find(cx->env->registry, json_string_value(n));
    const char *shown = t ? tg_tool_display_name(t, cx->principal) : NULL;
    if (shown) json_array_append_new(out, json_string(shown));
  }
  return out;
}

static int skill_load(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *slug = tg_json_str(args, "slug");
  tg_scope_ref chain;
  _cleanup_json_ json_t *found = NULL;
  int r = tg_scope_of(cx->db, cx->principal, &chain);
  if (r == TG_OK)
    r = active_skills(cx, &chain,
                      "s.id, s.slug, s.name, s.description, s.body, s.allowed_tools, s.examples",
                      slug, 1, &found);
  if (r < 0) return r;
  json_t *skill = json_array_get(found, 0);
  if (!skill)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "slug", slug),
                   "No skill %s is active for you.", slug);
  char summary[SUMMARY_MAX];
  snprintf(summary, sizeof summary, "Skill %s loaded", slug);
  /* The row carries the caller's whole scope chain, so the agents above it see it too. */
  _cleanup_json_ json_t *scope =
      json_pack("{s:s?,s:s?,s:s?}", "missionId", nonempty(chain.mission_id), "ideaId",
                nonempty(chain.idea_id), "workId", nonempty(chain.work_id));
  r = tg_activity(cx, "SKILL_INVOKED", scope, summary,
                  json_pack("{s:O,s:s,s:s?}", "skillId", json_object_get(skill, "id"),
                            "skillSlug", slug, "runId", cx->run_id));
  if (r < 0) return r;
  *ret = json_pack("{s:O,s:O,s:O,s:o}", "name", json_object_get(skill, "name"), "description",
                   json_object_get(skill, "description"), "body", json_object_get(skill, "body"),
                   "allowedTools",
                   tools_as_seen(cx, json_string_value(json_object_get(skill, "allowed_tools"))));
  if (!*ret) return TG_E_NOMEM;
  const char *examples = json_string_value(json_object_get(skill, "examples"));
  if (examples) json_object_set_new(*ret, "examples", json_loads(examples, 0, NULL));
  return TG_OK;
}

/* ---- kb.document.put, kb.document.list ------------------------------------------------- */

/* The work with slug, as a resolved scope reference. Missing answers not_found. */
static int find_work(tg_call_ctx *cx, const char *slug, tg_scope_ref *ref) {
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(cx->db, "SELECT id FROM works WHERE tenant_id = $1 AND slug = $2",
                          json_pack("[ss]", cx->principal->tenant_id, slug), &row);
  if (r < 0) return r;
  if (!row)
    return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "workSlug", slug), "No work %s.", slug);
  *ref = (tg_scope_ref){0};
  snprintf(ref->work_id, sizeof ref->work_id, "%s", json_string_value(json_object_get(row, "id")));
  return tg_scope_resolve(cx->db, cx->principal->tenant_id, ref);
}

static int out_of_scope(tg_call_ctx *cx, const char *key, const char *value) {
  return tg_fail(cx, TG_ERR_PERMISSION_DENIED,
                 json_pack("{s:s,s:s}", key, value, "reason", "out_of_scope"),
                 "%s %.*s is outside your scope.", key, TG_UTF8_CUT(value, 80));
}

static int kb_put(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *work_slug = tg_json_str(args, "workSlug"), *slug = tg_json_str(args, "slug");
  _cleanup_json_ json_t *existing = NULL;
  tg_scope_ref ref;
  int r = find_work(cx, work_slug, &ref);
  if (r < 0) return r;
  if (!tg_scope_reaches(cx->principal, &ref)) return out_of_scope(cx, "workSlug", work_slug);
  r = tg_db_query_row(cx->db, "SELECT id FROM kb_documents WHERE work_id = $1 AND slug = $2",
                      json_pack("[ss]", ref.work_id, slug), &existing);
  if (r < 0) return r;
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  if (existing) {
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(existing, "id")));
    r = tg_db_exec(cx->db,
                   "UPDATE kb_documents SET title = $1, body = $2, updated_at = $3 WHERE id = $4",
                   json_pack("[OOss]", json_object_get(args, "title"),
                             json_object_get(args, "body"), now, id),
                   NULL);
  } else {
    if (tg_uuid7(id) < 0) return TG_E_IO;
    r = tg_db_exec(cx->db,
                   "INSERT INTO kb_documents (id, tenant_id, mission_id, work_id, slug, title,"
                   " body, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)",
                   json_pack("[sssssOOs]", id, cx->principal->tenant_id, ref.mission_id,
                             ref.work_id, slug, json_object_get(args, "title"),
                             json_object_get(args, "body"), now),
                   NULL);
  }
  if (r < 0) return r;
  /* The row carries the work's parents, so mission and idea agents see it without joins. */
  _cleanup_json_ json_t *scope = json_pack("{s:s,s:s?,s:s}", "missionId", ref.mission_id, "ideaId",
                                           nonempty(ref.idea_id), "workId", ref.work_id);
  char summary[SUMMARY_MAX];
  snprintf(summary, sizeof summary, "Knowledge-base document %s of %s %s", slug, work_slug,
           existing ? "updated" : "created");
  r = tg_activity(cx, existing ? "KB_DOCUMENT_UPDATED" : "KB_DOCUMENT_CREATED", scope, summary,
                  json_pack("{s:s,s:s,s:s}", "documentId", id, "slug", slug, "workSlug",
                            work_slug));
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:s,s:b}", "id", id, "workSlug", work_slug, "slug", slug, "created",
                   !existing);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int kb_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const char *work_slug = tg_json_str(args, "workSlug");
  json_int_t limit = arg_int(args, "limit", LIST_LIMIT_DEFAULT);
  reach rc = reach_of(cx->principal);
  if (work_slug) {
    tg_scope_ref ref;
    int r = find_work(cx, work_slug, &ref);
    if (r < 0) return r;
    if (!tg_scope_reaches(cx->principal, &ref))
      return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "workSlug", work_slug),
                     "No work %s.", work_slug);
  }
  json_t *found = NULL;
  int r = tg_db_query(
      cx->db,
      "SELECT d.id, w.slug AS \"workSlug\", d.slug, d.title, LENGTH(d.body) AS characters,"
      " d.updated_at AS \"updatedAt\" FROM kb_documents d JOIN works w ON w.id = d.work_id"
      " WHERE d.tenant_id = $1 AND ($2 IS NULL OR w.slug = $2)"
      " AND ($3 IS NULL OR d.mission_id = $3) AND ($4 IS NULL OR w.idea_id = $4)"
      " AND ($5 IS NULL OR d.work_id = $5) ORDER BY w.slug, d.slug LIMIT $6",
      json_pack("[ss?s?s?s?I]", cx->principal->tenant_id, work_slug, rc.mission, rc.idea, rc.work,
                limit + 1),
      &found);
  if (r < 0) return r;
  bool truncated = tg_json_cut(found, limit);
  *ret = json_pack("{s:o,s:b}", "documents", found, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

/* ---- skill.catalog.add, skill.catalog.list --------------------------------------------- */

/* The bindings of one skill, or (skill_id NULL) of the tenant's first `first` skills by slug,
 * as {skill_id, label}, where label is the spelling skill.catalog.add takes: tenant,
 * mission:SLUG, work:SLUG, agent:SLUG. At most BINDINGS_MAX rows a skill. */
static int binding_labels(tg_call_ctx *cx, const char *skill_id, json_int_t first, json_t **ret) {
  return tg_db_query(
      cx->db,
      "SELECT b.skill_id, CASE WHEN b.level = 'tenant' THEN 'tenant'"
      " ELSE b.level || ':' || COALESCE(m.slug, w.slug, a.slug, '?') END AS label"
      " FROM skill_bindings b JOIN skills s ON s.id = b.skill_id"
      " LEFT JOIN missions m ON b.level = 'mission' AND m.id = b.target_id"
      " LEFT JOIN works w ON b.level = 'work' AND w.id = b.target_id"
      " LEFT JOIN agents a ON b.level = 'agent' AND a.id = b.target_id"
      " WHERE s.tenant_id = $1 AND (b.skill_id = $2 OR ($2 IS NULL AND b.skill_id IN"
      " (SELECT id FROM skills WHERE tenant_id = $1 ORDER BY slug LIMIT $3))) ORDER BY label",
      json_pack("[ss?I]", cx->principal->tenant_id, skill_id, first), ret);
}

static json_t *labels_of(json_t *bindings, const char *skill_id) {
  json_t *out = json_array();
  size_t i;
  json_t *b;
  json_array_foreach(bindings, i, b) {
    if (strcmp(json_string_value(json_object_get(b, "skill_id")), skill_id) == 0)
      json_array_append(out, json_object_get(b, "label"));
  }
  return out;
}

/* A binding resolved to what the table stores, and checked against the caller's reach: a
 * scoped operator may bind only inside its scope (an agent binding takes effect where that
 * agent lives), and only a tenant caller may bind to the whole tenant. Each query answers the
 * target's id and the scope the binding takes effect in. */
static int resolve_binding(tg_call_ctx *cx, const char *label, const char **level,
                           char target[TG_UUID_LEN + 1]) {
  static const struct { const char *level, *sql; } targets[] = {
      {"mission", "SELECT id, 'mission' AS scope_type, id AS scope_id FROM missions"
                  " WHERE tenant_id = $1 AND slug = $2"},
      {"work", "SELECT id, 'work' AS scope_type, id AS scope_id FROM works"
               " WHERE tenant_id = $1 AND slug = $2"},
      {"agent", "SELECT id, scope_type, scope_id FROM agents WHERE tenant_id = $1 AND slug = $2"},
  };
  tg_scope_ref ref = {0};
  *target = '\0';
  *level = "tenant";
  const char *colon = strchr(label, ':');
  if (colon) {
    size_t k = 0, n = (size_t)(colon - label);
    while (k < 3 && !(strlen(targets[k].level) == n && strncmp(label, targets[k].level, n) == 0))
      k++;
    if (k == 3) return TG_E_INVAL; /* the input schema admits no other level */
    *level = targets[k].level;
    _cleanup_json_ json_t *row = NULL;
    int r = tg_db_query_row(cx->db, targets[k].sql,
                            json_pack("[ss]", cx->principal->tenant_id, colon + 1), &row);
    if (r < 0) return r;
    if (!row)
      return tg_fail(cx, TG_ERR_NOT_FOUND, json_pack("{s:s}", "binding", label),
                     "No %s %s in this workspace.", *level, colon + 1);
    snprintf(target, TG_UUID_LEN + 1, "%s", json_string_value(json_object_get(row, "id")));
    const char *type = json_string_value(json_object_get(row, "scope_type"));
    const char *scope_id = json_string_value(json_object_get(row, "scope_id"));
    if (scope_id) {
      char *slot = strcmp(type, "mission") == 0 ? ref.mission_id
                   : strcmp(type, "idea") == 0  ? ref.idea_id
                                                : ref.work_id;
      snprintf(slot, TG_UUID_LEN + 1, "%s", scope_id);
      r = tg_scope_resolve(cx->db, cx->principal->tenant_id, &ref);
      if (r < 0) return r;
    }
  }
  bool tenant_wide = !*ref.mission_id && !*ref.idea_id && !*ref.work_id;
  if (tenant_wide ? cx->principal->scope_id != NULL : !tg_scope_reaches(cx->principal, &ref))
    return out_of_scope(cx, "binding", label);
  return TG_OK;
}

/* A scoped operator replaces only a skill that acts inside its scope: every binding the skill
 * already has must be one it could add itself. */
static int may_replace(tg_call_ctx *cx, const char *skill_id) {
  if (!cx->principal->scope_id) return TG_OK;
  _cleanup_json_ json_t *current = NULL;
  int r = binding_labels(cx, skill_id, 0, &current);
  size_t i;
  json_t *b;
  json_array_foreach(current, i, b) {
    const char *level;
    char target[TG_UUID_LEN + 1];
    if (r == TG_OK)
      r = resolve_binding(cx, json_string_value(json_object_get(b, "label")), &level, target);
  }
  return r;
}

/* Allowed tools must name tools of this catalog: a typo would silently point at nothing.
 * They are stored canonical, so renaming profiles never breaks them. */
static int canonical_tools(tg_call_ctx *cx, json_t *names, json_t **ret) {
  _cleanup_json_ json_t *out = json_array();
  size_t i;
  json_t *n;
  json_array_foreach(names, i, n) {
    const tg_tool *t = tg_registry_find(cx->env->registry, json_string_value(n));
    if (!t)
      return tg_fail(cx, TG_ERR_VALIDATION_FAILED, json_pack("{s:O}", "tool", n),
                     "The skill's allowed-tools name %.*s, which is no tool of this catalog.",
                     TG_UTF8_CUT(json_string_value(n), 128));
    json_array_append_new(out, json_string(t->name));
  }
  *ret = TAKE_PTR(out);
  return TG_OK;
}

static int skill_add(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_t *text = json_object_get(args, "text");
  _cleanup_json_ json_t *skill = NULL, *tools = NULL, *existing = NULL, *labels = NULL;
  _cleanup_free_ char *why = NULL;
  int r = tg_skill_file_parse(json_string_value(text), json_string_length(text), &skill, &why);
  if (r == TG_E_INVAL)
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED, json_pack("{s:s}", "reason", why),
                   "The skill file is not valid: %s.", why);
  if (r < 0) return r;
  r = canonical_tools(cx, json_object_get(skill, "allowedTools"), &tools);
  if (r < 0) return r;

  json_t *bindings = json_object_get(args, "bindings");
  size_t n_bindings = json_array_size(bindings), i;
  struct { const char *level; char target[TG_UUID_LEN + 1]; } resolved[BINDINGS_MAX];
  if (n_bindings > BINDINGS_MAX) return TG_E_INVAL; /* the input schema's maxItems */
  for (i = 0; i < n_bindings; i++) {
    r = resolve_binding(cx, json_string_value(json_array_get(bindings, i)), &resolved[i].level,
                        resolved[i].target);
    if (r < 0) return r;
  }

  const char *slug = json_string_value(json_object_get(skill, "slug"));
  r = tg_db_query_row(cx->db, "SELECT id FROM skills WHERE tenant_id = $1 AND slug = $2",
                      json_pack("[ss]", cx->principal->tenant_id, slug), &existing);
  if (r < 0) return r;
  char id[TG_UUID_LEN + 1], now[TG_ISO_LEN + 1];
  tg_now_iso(now);
  json_t *examples = json_object_get(skill, "examples");
  if (existing) {
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(existing, "id")));
    r = may_replace(cx, id);
    if (r < 0) return r;
    r = tg_db_exec(cx->db,
                   "UPDATE skills SET name = $1, description = $2, body = $3, allowed_tools = $4,"
                   " examples = $5, updated_at = $6 WHERE id = $7",
                   json_pack("[OOOOOss]", json_object_get(skill, "name"),
                             json_object_get(skill, "description"), json_object_get(skill, "body"),
                             tools, examples ? examples : json_null(), now, id),
                   NULL);
  } else {
    if (tg_uuid7(id) < 0) return TG_E_IO;
    r = tg_db_exec(cx->db,
                   "INSERT INTO skills (id, tenant_id, slug, name, description, body,"
                   " allowed_tools, examples, created_at, updated_at)"
                   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
                   json_pack("[sssOOOOOs]", id, cx->principal->tenant_id, slug,
                             json_object_get(skill, "name"), json_object_get(skill, "description"),
                             json_object_get(skill, "body"), tools,
                             examples ? examples : json_null(), now),
                   NULL);
  }
  json_t *added = json_array();
  for (i = 0; r == TG_OK && i < n_bindings; i++) {
    int64_t changes = 0;
    r = tg_db_exec(cx->db,
                   "INSERT INTO skill_bindings (skill_id, level, target_id, created_at)"
                   " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                   json_pack("[sss?s]", id, resolved[i].level, nonempty(resolved[i].target), now),
                   &changes);
    if (changes) json_array_append(added, json_array_get(bindings, i));
  }
  char summary[SUMMARY_MAX];
  snprintf(summary, sizeof summary, "Skill %s %s", slug, existing ? "updated" : "added");
  if (r == TG_OK)
    r = tg_activity(cx, "SKILL_INSTALLED", NULL, summary,
                    json_pack("{s:s,s:s,s:b,s:O}", "skillId", id, "slug", slug, "created",
                              !existing, "bindingsAdded", added));
  json_decref(added);
  if (r == TG_OK) r = binding_labels(cx, id, 0, &labels);
  if (r < 0) return r;
  *ret = json_pack("{s:s,s:s,s:b,s:o}", "skillId", id, "slug", slug, "created", !existing,
                   "bindings", labels_of(labels, id));
  return *ret ? TG_OK : TG_E_NOMEM;
}

static int skill_catalog_list(tg_call_ctx *cx, json_t *args, json_t **ret) {
  json_int_t limit = arg_int(args, "limit", LIST_LIMIT_DEFAULT);
  _cleanup_json_ json_t *found = NULL, *bindings = NULL;
  int r = tg_db_query(cx->db,
                      "SELECT id, slug, name, description, allowed_tools, updated_at FROM skills"
                      " WHERE tenant_id = $1 ORDER BY slug LIMIT $2",
                      json_pack("[sI]", cx->principal->tenant_id, limit + 1), &found);
  if (r == TG_OK) r = binding_labels(cx, NULL, limit, &bindings);
  if (r < 0) return r;
  bool truncated = tg_json_cut(found, limit);
  json_t *skills = json_array();
  size_t i;
  json_t *s;
  json_array_foreach(found, i, s) {
    const char *id = json_string_value(json_object_get(s, "id"));
    json_t *tools = json_loads(json_string_value(json_object_get(s, "allowed_tools")), 0, NULL);
    json_array_append_new(skills,
                          json_pack("{s:s,s:O,s:O,s:O,s:o,s:o,s:O}", "id", id, "slug",
                                    json_object_get(s, "slug"), "name", json_object_get(s, "name"),
                                    "description", json_object_get(s, "description"),
                                    "allowedTools", tools ? tools : json_array(), "bindings",
                                    labels_of(bindings, id), "updatedAt",
                                    json_object_get(s, "updated_at")));
  }
  *ret = json_pack("{s:o,s:b}", "skills", skills, "truncated", truncated);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const tg_handler_entry handlers[] = {
    {"work.activity.list", activity_list}, {"work.mission.state", mission_state},
    {"kb.document.get", kb_get},           {"agent.skill.list", skill_list},
    {"agent.skill.load", skill_load},      {"kb.document.put", kb_put},
    {"kb.document.list", kb_list},         {"skill.catalog.add", skill_add},
    {"skill.catalog.list", skill_catalog_list},
};

const tg_provider tg_provider_knowledge = {
    .name = "knowledge",
    .spec_file = "knowledge.json",
    .handlers = handlers,
    .n_handlers = sizeof handlers / sizeof handlers[0],
};
