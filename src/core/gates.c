#include "core/gates.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/approval.h"
#include "core/run.h"
#include "util/cleanup.h"
#include "util/ids.h"
#include "util/json.h"
#include "util/status.h"

/* A gate answers 0 (pass), 1 (refuse, filling the refusal) or negative TG_E_*. */
typedef int (*gate_fn)(const tg_gate_input *in, tg_refusal *out);

static int refuse(tg_refusal *out, tg_errcode code, json_t *details, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(tg_refusal *out, tg_errcode code, json_t *details, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->message, sizeof out->message, fmt, ap);
  va_end(ap);
  tg_utf8_mend(out->message); /* it may quote foreign bytes, or halve a character */
  out->code = code;
  out->details = details;
  return 1;
}

static json_t *surface_list(unsigned surfaces) {
  json_t *list = json_array();
  for (unsigned bit = 1; list && bit <= TG_SURFACE_API; bit <<= 1)
    if (surfaces & bit) json_array_append_new(list, json_string(tg_surface_name((tg_surface)bit)));
  return list;
}

static int gate_surface(const tg_gate_input *in, tg_refusal *out) {
  if (in->tool->surfaces & in->surface) return 0;
  return refuse(out, TG_ERR_PERMISSION_DENIED,
                json_pack("{s:s,s:s,s:o}", "reason", "surface", "surface",
                          tg_surface_name(in->surface), "surfaces",
                          surface_list(in->tool->surfaces)),
                "Tool %s is not available on the %s surface.", in->tool->name,
                tg_surface_name(in->surface));
}

/* A tool that acts on its calling agent's own is no user's to call, and one only a person may
 * call (deciding an approval) no agent's, whatever the grants: it is not listed, and a call is
 * refused before its handler. */
static int gate_caller(const tg_gate_input *in, tg_refusal *out) {
  bool agent = in->principal->kind == TG_PRINCIPAL_AGENT;
  if ((in->tool->flags & TG_TOOL_AGENTS_ONLY) && !agent)
    return refuse(out, TG_ERR_PERMISSION_DENIED, json_pack("{s:s}", "reason", "agents_only"),
                  "Only an agent may call %s: it acts on the calling agent's own.",
                  in->tool->name);
  if ((in->tool->flags & TG_TOOL_PEOPLE_ONLY) && agent)
    return refuse(out, TG_ERR_PERMISSION_DENIED, json_pack("{s:s}", "reason", "people_only"),
                  "Only a person may call %s, whatever an agent's grants.", in->tool->name);
  return 0;
}

static int gate_status(const tg_gate_input *in, tg_refusal *out) {
  const tg_principal *p = in->principal;
  if (tg_principal_acts(p)) return 0;
  return refuse(out, TG_ERR_PERMISSION_DENIED,
                json_pack("{s:s,s:s}", "reason", "agent_not_active", "status", p->status),
                "Agent %s is %s, not active.", p->name, p->status);
}

static const char *flag_of(const char *permission) {
  for (size_t i = 0; i < tg_agent_flags_count; i++)
    if (strcmp(tg_agent_flags[i].permission, permission) == 0) return tg_agent_flags[i].flag;
  return NULL;
}

static int gate_permissions(const tg_gate_input *in, tg_refusal *out) {
  const tg_tool *t = in->tool;
  json_t *missing = NULL;
  for (size_t i = 0; i < t->n_permissions; i++) {
    if (tg_principal_can(in->principal, t->permissions[i])) continue;
    if (!missing && !(missing = json_array())) return TG_E_NOMEM;
    json_array_append_new(missing, json_string(t->permissions[i]));
  }
  if (!missing) return 0;
  const char *first = json_string_value(json_array_get(missing, 0));
  json_t *details = json_pack("{s:s,s:s,s:o}", "reason", "missing_permission",
                              "missingPermission", first, "missing", missing);
  if (details && flag_of(first)) json_object_set_new(details, "flag", json_string(flag_of(first)));
  return refuse(out, TG_ERR_PERMISSION_DENIED, details, "Calling %s requires the permission %s.",
                t->name, first);
}

/* A workspace under the "catalog" naming profile offers its agents exactly seed 000's tools
 * (those with an alias): the others are neither listed nor run for them. */
static int gate_naming(const tg_gate_input *in, tg_refusal *out) {
  if (tg_tool_display_name(in->tool, in->principal)) return 0;
  return refuse(out, TG_ERR_PERMISSION_DENIED,
                json_pack("{s:s,s:s}", "reason", "not_in_naming_profile", "namingProfile",
                          in->principal->naming_profile),
                "Tool %s has no seed name, and this workspace offers its agents only the "
                "seed's tools.", in->tool->name);
}

/* Workspace tool policy. Without a row, low and medium risk tools are enabled and high risk
 * tools are disabled (default deny, seed 001). */
static int gate_policy(const tg_gate_input *in, tg_refusal *out) {
  const char *mode = json_string_value(json_object_get(in->principal->policies, in->tool->name));
  if (mode && strcmp(mode, "disabled") == 0)
    return refuse(out, TG_ERR_PERMISSION_DENIED,
                  json_pack("{s:s}", "reason", "disabled_by_policy"),
                  "Tool %s is disabled by the workspace tool policy.", in->tool->name);
  if (!mode && in->tool->risk == TG_RISK_HIGH)
    return refuse(out, TG_ERR_PERMISSION_DENIED,
                  json_pack("{s:s,s:s}", "reason", "high_risk_default_deny", "risk", "high"),
                  "Tool %s is high risk and the workspace tool policy has not enabled it.",
                  in->tool->name);
  return 0; /* a tool held for approval is offered: the approval gate holds its calls */
}

#define RUN_ID_CHARS "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-"

/* A call attached to a run must name a running run of the calling agent. */
static int gate_run(const tg_gate_input *in, tg_refusal *out) {
  if (!in->run_id) return 0;
  if (in->principal->kind != TG_PRINCIPAL_AGENT)
    return refuse(out, TG_ERR_VALIDATION_FAILED, json_pack("{s:s}", "reason", "run_for_user"),
                  "Only agents' calls belong to runs.");
  /* A run id is a UUID: one of other characters, or longer, names no run and is not echoed
   * back (a header or a command line gives it, in bytes of any kind). */
  size_t len = strlen(in->run_id);
  if (len == 0 || len > TG_UUID_LEN || strspn(in->run_id, RUN_ID_CHARS) != len)
    return refuse(out, TG_ERR_VALIDATION_FAILED,
                  json_pack("{s:s,s:i}", "reason", "bad_run_id", "maxLength", TG_UUID_LEN),
                  "A run id is 1 to %d letters, digits and dashes.", TG_UUID_LEN);
  if (in->run_read_later) return 0;
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(in->db,
                          "SELECT status FROM agent_runs WHERE id = $1 AND agent_id = $2",
                          json_pack("[ss]", in->run_id, in->principal->subject_id), &row);
  if (r < 0) return r;
  if (!row)
    return refuse(out, TG_ERR_NOT_FOUND, json_pack("{s:s}", "runId", in->run_id),
                  "No run %s of this agent.", in->run_id);
  const char *status = json_string_value(json_object_get(row, "status"));
  if (strcmp(status, "running") != 0)
    return refuse(out, TG_ERR_PRECONDITION_FAILED,
                  json_pack("{s:s,s:s}", "runId", in->run_id, "status", status),
                  "Run %s is %s, not running.", in->run_id, status);
  return 0;
}

/* A tool declaring maxPerRun may succeed that many times in one run (e.g. one agent-file
 * edit per run); refused calls do not count. Over MCP the client makes an agent's runs (its
 * session, its stdio server), and an agent's call that names none is a run of its own: the
 * cap would never count a second call, so such a call is refused until it names a run. */
static int gate_run_cap(const tg_gate_input *in, tg_refusal *out) {
  if (!in->tool->max_per_run) return 0;
  if (!in->run_id) {
    if (in->surface != TG_SURFACE_MCP || in->principal->kind != TG_PRINCIPAL_AGENT) return 0;
    return refuse(out, TG_ERR_PRECONDITION_FAILED,
                  json_pack("{s:s,s:i}", "reason", "run_required", "maxPerRun",
                            (int)in->tool->max_per_run),
                  "%s is capped at %u call%s a run, and this call is in no run: start one "
                  "(toolgate runs start) and name it (header Toolgate-Run, option --run).",
                  in->tool->name, in->tool->max_per_run, in->tool->max_per_run == 1 ? "" : "s");
  }
  int64_t done = 0;
  int r = tg_run_successes(in->db, in->run_id, in->tool->name, &done);
  if (r < 0) return r;
  if (done < (int64_t)in->tool->max_per_run) return 0;
  return refuse(out, TG_ERR_PRECONDITION_FAILED,
                json_pack("{s:s,s:s,s:i}", "reason", "per_run_cap", "runId", in->run_id,
                          "maxPerRun", (int)in->tool->max_per_run),
                "This run already called %s %u time%s; that is its cap per run.", in->tool->name,
                in->tool->max_per_run, in->tool->max_per_run == 1 ? "" : "s");
}

/* A call that writes or costs, by an agent inside a mission whose spend reached its cap. */
static int gate_budget(const tg_gate_input *in, tg_refusal *out) {
  const tg_principal *p = in->principal;
  if (in->tool->effect == TG_EFFECT_READ || !p->scope_id) return 0;
  _cleanup_json_ json_t *row = NULL;
  int r = tg_db_query_row(
      in->db,
      "SELECT m.id, m.current_spend_cents, m.cap_cents FROM missions m WHERE m.cap_cents IS NOT NULL"
      " AND m.id = (SELECT $1 WHERE $2 = 'mission'"
      " UNION ALL SELECT mission_id FROM ideas WHERE id = $1 AND $2 = 'idea'"
      " UNION ALL SELECT mission_id FROM works WHERE id = $1 AND $2 = 'work')",
      json_pack("[ss]", p->scope_id, p->scope_type), &row);
  if (r < 0) return r;
  if (!row) return 0;
  json_int_t spent = json_integer_value(json_object_get(row, "current_spend_cents"));
  json_int_t cap = json_integer_value(json_object_get(row, "cap_cents"));
  if (spent < cap) return 0;
  return refuse(out, TG_ERR_BUDGET_EXCEEDED,
                json_pack("{s:O,s:I,s:I}", "missionId", json_object_get(row, "id"),
                          "currentSpendCents", spent, "capCents", cap),
                "The mission's budget is spent (%lld of %lld cents).", (long long)spent,
                (long long)cap);
}

static int gate_arguments(const tg_gate_input *in, tg_refusal *out) {
  json_t *violations = json_array();
  if (!violations) return TG_E_NOMEM;
  if (tg_schema_validate(in->tool->input, in->args, violations, TG_MAX_VIOLATIONS)) {
    json_decref(violations);
    return 0;
  }
  json_t *first = json_array_get(violations, 0);
  const char *where = json_string_value(json_object_get(first, "instancePath"));
  return refuse(out, TG_ERR_VALIDATION_FAILED, json_pack("{s:o}", "violations", violations),
                "Invalid arguments: %.*s%s%.*s", TG_UTF8_CUT(where && *where ? where : "", 80),
                where && *where ? ": " : "",
                TG_UTF8_CUT(json_string_value(json_object_get(first, "message")), 120));
}

/* A call of a tool the policy holds for approval runs on an approval of this very call (its
 * caller, tool and arguments) that is still good, and uses it (call.c). Without one the
 * refusal names the request, which the refused call's record opens when there is none. */
static int gate_approval(const tg_gate_input *in, tg_refusal *out) {
  if (!tg_approval_needed(in->principal, in->tool, in->surface)) return 0;
  char made[65];
  const char *digest = in->approval_digest;
  _cleanup_json_ json_t *row = NULL;
  int r = digest ? TG_OK : tg_approval_subject(in->tool, in->args, NULL, made);
  if (!digest) digest = made;
  if (r == TG_OK) r = tg_approval_find(in->db, in->principal->id, in->tool->name, digest, &row);
  if (r < 0) return r;
  const char *status = tg_json_str(row, "status");
  if (status && strcmp(status, "approved") == 0) return 0;
  if (status && strcmp(status, "denied") == 0)
    return refuse(out, TG_ERR_PERMISSION_DENIED,
                  json_pack("{s:s,s:O,s:O,s:O*}", "reason", "approval_denied", "approvalId",
                            json_object_get(row, "id"), "until", json_object_get(row, "expires_at"),
                            "note", json_object_get(row, "note")),
                  "This call to %s was denied; the same call is refused until %s.",
                  in->tool->name, tg_json_str(row, "expires_at"));
  return refuse(out, TG_ERR_PRECONDITION_FAILED,
                json_pack("{s:s,s:O*}", "reason", "approval_required", "approvalId",
                          json_object_get(row, "id")),
                "%s is held for approval: this call waits for one; call again with the same"
                " arguments once it is approved (details.approvalId names the request).",
                in->tool->name);
}

/* AT_WRITE: the gates that read rows other calls write; tg_gates_recheck runs them again in
 * the call's own write transaction, where no other call can move those rows. */
enum { FOR_LISTING = 1, FOR_CALL = 2, AT_WRITE = 4 };

static const struct {
  const char *name;
  gate_fn fn;
  unsigned when;
} gates[] = {
    {"run", gate_run, FOR_CALL | AT_WRITE},
    {"surface", gate_surface, FOR_LISTING | FOR_CALL},
    {"caller", gate_caller, FOR_LISTING | FOR_CALL},
    {"status", gate_status, FOR_LISTING | FOR_CALL},
    {"naming", gate_naming, FOR_LISTING | FOR_CALL},
    {"permissions", gate_permissions, FOR_LISTING | FOR_CALL},
    {"policy", gate_policy, FOR_LISTING | FOR_CALL},
    {"run_cap", gate_run_cap, FOR_CALL | AT_WRITE},
    {"budget", gate_budget, FOR_CALL | AT_WRITE},
    {"arguments", gate_arguments, FOR_CALL},
    {"approval", gate_approval, FOR_CALL | AT_WRITE},
};

static int run_gates(const tg_gate_input *in, unsigned phase, tg_refusal *refusal, json_t *trace) {
  for (size_t i = 0; i < sizeof gates / sizeof gates[0]; i++) {
    if (!(gates[i].when & phase)) continue;
    int r = gates[i].fn(in, refusal);
    if (r == 1) refusal->gate = gates[i].name;
    if (trace) {
      json_t *step = json_pack("{s:s,s:b}", "gate", gates[i].name, "ok", r == 0);
      if (step && r == 1) json_object_set_new(step, "detail", json_string(refusal->message));
      json_array_append_new(trace, step);
    }
    if (r != 0) return r;
  }
  return 0;
}

int tg_gates_run(const tg_gate_input *in, tg_refusal *refusal, json_t *trace) {
  return run_gates(in, in->listing ? FOR_LISTING : FOR_CALL, refusal, trace);
}

int tg_gates_recheck(const tg_gate_input *in, tg_refusal *refusal) {
  return run_gates(in, AT_WRITE, refusal, NULL);
}

int tg_gates_check_run(const tg_gate_input *in, tg_refusal *refusal) {
  int r = gate_run(in, refusal);
  if (r == 1) refusal->gate = "run";
  return r;
}

void tg_refusal_done(tg_refusal *refusal) {
  json_decref(refusal->details);
  refusal->details = NULL;
}
