/* The way back to the client during a call: progress, log messages, and requests to the
 * client (sampling, elicitation) or, in MCP 2026-07-28, input asked for by returning
 * {"resultType":"input_required",...}. A surface fills one per call (tg_call_request.client);
 * handlers reach it as cx->client and never learn the transport. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

typedef struct tg_call_ctx tg_call_ctx; /* core/call.h */
struct tg_tool;                         /* core/tool.h */

/* Whether a result of tool asks its client for input (an InputRequiredResult): only a tool
 * whose result is the MCP result as it is (TG_TOOL_MCP_CONTENT) can ask; another's value is
 * content, whatever it holds. */
bool tg_client_asks_input(const struct tg_tool *tool, json_t *result);

/* What a surface offers a handler for the duration of one call. */
typedef struct tg_client_channel {
  void *self;
  json_t *progress_token; /* borrowed; NULL: the client asked for no progress */
  const char *log_level;  /* lowest level the client wants; NULL: send no log messages */
  json_t *capabilities;   /* borrowed client capabilities; NULL when unknown */
  /* 2026-07-28 multi round-trip requests: the client's answers to the input requests of an
   * earlier round (borrowed object, NULL in the first round) and the request state that
   * round returned, verified by the surface (NULL when none). A handler asks for input by
   * returning {"resultType":"input_required","inputRequests":{...},"requestState"?:...}. */
  json_t *input_responses;
  const char *request_state;
  /* Sends a notification related to the call; params is stolen. A list_changed
   * notification (notifications/tools/list_changed, notifications/prompts/list_changed) is
   * about the server, not the call: the surface announces it to whoever listens. */
  int (*notify)(void *self, const char *method, json_t *params);
  /* Sends a request to the client and waits for its result (a new reference in *ret), or
   * NULL when this transport or revision cannot (then the handler fails cleanly). params is
   * stolen. Returns 0, TG_E_TOOL with *ret the client's error object (or one made here
   * when its result does not answer the request, tg_client_answer_reads, with that result as
   * data.result), TG_E_INVAL without
   * sending anything when the client did not declare it can answer (tg_client_can) or
   * may not be asked yet (a 2025-11-25 session before its notifications/initialized),
   * TG_E_IO when no answer came (the client went away, or did not answer in the time the
   * transport waits, or the server is stopping; also when the client cancelled the call
   * while it waited: see cancelled), TG_E_TOO_LARGE when it cannot go out now (too many
   * questions to this client wait already, or too much output waits for it to read), or
   * another TG_E_*. */
  int (*ask)(void *self, const char *method, json_t *params, json_t **ret);
  /* Checks a result the handler returned before anything of the call is written (NULL:
   * none): a result the surface cannot carry to this client (input asked for on a revision,
   * or of a kind, the client cannot give) fails the call here through tg_fail on cx, so that
   * nothing of it is committed and its audit says why. */
  int (*check_result)(void *self, tg_call_ctx *cx, json_t *result);
  /* Ends the call's response stream now, before the result, for the client to resume it
   * later (2025-11-25 SSE polling); the result waits for the client. NULL when the
   * transport cannot (then the result is sent as usual). */
  int (*close_stream)(void *self);
  /* Turns the call into an MCP task: the client is answered now with the task's id and
   * polls for the result this handler goes on to return, or for the input it asks for by
   * returning an InputRequiredResult (tasks/update brings the answers; the handler then runs
   * again with them). Returns 0 (also once already a task), or a failure: the client
   * cancelled meanwhile (see cancelled), or the task could not be recorded; either way the
   * call goes on as a plain one, and should fail. NULL when the call cannot become a task (the
   * tool declares no taskSupport, or the client took no tasks): the handler then runs as
   * usual. From a call that may become a task no notification reaches the client. */
  int (*detach)(void *self);
  /* Whether the call was cancelled, by its client or by a server stopping that waits no more
   * (NULL when the surface cannot tell). Its answer is never sent, so a handler that learns
   * it should fail: failing rolls back what it wrote. The gate asks too, as the call's write
   * is queued for commit, and fails a call that ended all the same. */
  bool (*cancelled)(void *self);
  /* Whether cancelled said so, to the handler or to the gate: asked by the gate once the
   * call failed, to record its run as cancelled rather than failed (NULL: failed). A failure
   * the handler met on its own, though a cancellation came, stays one. */
  bool (*cancel_heard)(void *self);
} tg_client_channel;

/* Whether a client that declared capabilities (its ClientCapabilities object) can answer a
 * request of method with params: sampling, roots, or elicitation in the mode it names (an
 * elicitation capability that is an empty object declares form mode alone). */
bool tg_client_can(const json_t *capabilities, const char *method, const json_t *params);
/* What tg_client_can reads of declared capabilities (an object), as a new object: what a
 * session keeps of them for its life, however much the client declared. NULL without
 * memory. */
json_t *tg_client_capabilities_read(const json_t *declared);
/* Whether declared capabilities (an object) give one of those read (roots, sampling,
 * elicitation) as something other than an object, which would read as not declared. */
bool tg_client_read_capabilities_malformed(const json_t *declared);
/* Whether declared capabilities (an object) give something other than an object where the
 * protocol's ClientCapabilities has one: experimental and each of its entries, roots,
 * sampling (and its context and tools), elicitation (and its form and url), extensions and
 * each extension's settings. */
bool tg_client_capabilities_malformed(const json_t *declared);
/* The ClientCapabilities a request of method with params needs ({"sampling":{}},
 * {"elicitation":{"form":{}}}, {"elicitation":{"url":{}}}, ...), a new reference in *ret:
 * 0, TG_E_INVAL for a method no client can answer, or TG_E_NOMEM. */
int tg_client_requirement(const char *method, const json_t *params, json_t **ret);
/* Whether answer, the client's answer to its request of method with params
 * (elicitation/create, sampling/createMessage or roots/list; any other: false), reads as that
 * request's result: an ElicitResult (an action it has; content of the field types elicitation
 * takes and, once accepted, what the requestedSchema asks), a CreateMessageResult (a role,
 * content and the model) or a ListRootsResult (roots, each with a uri). What it means is the
 * handler's to judge. */
bool tg_client_answer_reads(const char *method, const json_t *params, const json_t *answer);

/* Whether answer, sent before anything was asked (nothing says what it answers), reads as the
 * result of a request of some kind the client declared it can answer (capabilities): the kind
 * its shape tells (an ElicitResult has an action, a ListRootsResult roots, a
 * CreateMessageResult neither), checked as tg_client_answer_reads checks one asked without
 * params (an elicitation in any mode, a sampling offering no tools). */
bool tg_client_unasked_answer_reads(const json_t *capabilities, const json_t *answer);

/* A request to the client of method with params cut down to what tg_client_answer_reads
 * checks its answer against ({"method":...,"params":{...}}, new; NULL without memory): what
 * a stateless server keeps of what it asked, to check the answers of a later request. */
json_t *tg_client_answer_terms(const char *method, const json_t *params);
