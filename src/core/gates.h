/* The gates of the call path, in the order they run (private to src/core). The tool list
 * offered to a principal is computed by the same gates, so offer and call cannot disagree. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "core/call.h"

typedef struct tg_refusal {
  const char *gate; /* the gate that refused */
  tg_errcode code;
  char message[256];
  json_t *details; /* owned */
} tg_refusal;

typedef struct tg_gate_input {
  const tg_env *env;
  tg_db *db; /* where the gates that read rows read them; unused when listing */
  const tg_principal *principal;
  const tg_tool *tool;
  tg_surface surface;
  json_t *args;       /* NULL when listing */
  const char *run_id; /* NULL when listing or not given */
  bool run_read_later; /* whether run_id still runs is read in the write transaction */
  const char *approval_digest; /* the call's (tg_approval_subject), when made already */
  bool listing;       /* deciding what to offer rather than whether to run */
} tg_gate_input;

/* Runs the gates that apply. Returns 0 when every gate passed, 1 when one refused (filling
 * *refusal), negative TG_E_* when a gate could not decide (database failure).
 * When trace is an array, appends {"gate","ok","detail"?} for each gate that ran. */
int tg_gates_run(const tg_gate_input *in, tg_refusal *refusal, json_t *trace);

/* Runs again the gates that read rows other calls write (the run's status, its count of
 * calls, the mission's spend), on in->db inside the call's write transaction: what passed in
 * the snapshot tg_gates_run read may have moved since. Answers as tg_gates_run. */
int tg_gates_recheck(const tg_gate_input *in, tg_refusal *refusal);

/* The run gate alone, for a call of no tool (the other gates need one): whether in->run_id,
 * when given, names a running run of the calling agent. Answers as tg_gates_run. */
int tg_gates_check_run(const tg_gate_input *in, tg_refusal *refusal);

void tg_refusal_done(tg_refusal *refusal);
