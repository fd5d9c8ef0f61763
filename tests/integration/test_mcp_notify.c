/* MCP cancellation (of calls, and of a call in the instant it becomes a task) and list-change
 * notifications on a real workspace: through the transport-neutral dispatch, then end to end
 * over stdio (pipes, the server on a thread). */
#define _GNU_SOURCE
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "mcp/stdio.h"
#include "mcp/tasks.h"
#include "tools/conformance.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/status.h"

#define MODERN_META                                                      \
  "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
  "\"io.modelcontextprotocol/clientCapabilities\":{}}"
#define INITIALIZE_AT(version)                                                              \
  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":" \
  "\"" version "\",\"capabilities\":{\"sampling\":{}}}}"
#define INITIALIZE INITIALIZE_AT("2025-11-25")
#define INITIALIZED "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"
#define ASK_WRITE(id) \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\",\"params\":{\"name\":\"test_ask_write\"}}"
#define CANCEL(id) \
  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":" #id "}}"
#define PING(id) "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"ping\"}"
#define CALL_TOOL_LIST(id)                                                                  \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\",\"params\":{\"name\":" \
  "\"agent_tool_list\",\"arguments\":{}}}"
#define LIST(id) "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/list\"}"
#define AWAIT_CANCEL(id) \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\",\"params\":{\"name\":\"test_await_cancel\"}}"
/* A 2026-07-28 call of slow_compute for seconds (JSON text) from a client that takes tasks. */
#define SLOW_TASK(seconds)                                                                     \
  "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"slow_compute\"," \
  "\"arguments\":{\"seconds\":" seconds "},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"  \
  "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{"                 \
  "\"io.modelcontextprotocol/tasks\":{}}}}}}"
#define HANG_GUARD_MS 30000 /* a read that waits this long means the server hung: not a timing check */

/* An interactive tool that records an activity row, then asks the client: a cancellation
 * while it waits must leave no row behind. */
static int ask_write(tg_call_ctx *cx, json_t *args, json_t **ret) {
  int r = tg_activity(cx, "ASKED", NULL, "asked the client", NULL);
  if (r < 0) return r;
  const tg_client_channel *ch = cx->client;
  json_t *answer = NULL;
  r = ch->ask(ch->self, "sampling/createMessage",
              json_pack("{s:[{s:s,s:{s:s,s:s}}],s:i}", "messages", "role", "user", "content",
                        "type", "text", "text", "hi", "maxTokens", 10),
              &answer);
  json_decref(answer);
  if (r < 0 && ch->cancelled(ch->self))
    return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL, "The client cancelled the call");
  if (r < 0) return r;
  *ret = json_pack("{s:b}", "ok", 1);
  return TG_OK;
}

/* What a call of test.cancelled.detach does: unless the test cancels it later, its request
 * (number DETACH_ID) is cancelled in the table the test names, in the instant before the
 * handler detaches, as a client's cancellation may cross the task's creation; then it waits
 * to hear of it. */
#define DETACH_ID 7
static tg_mcp_inflight *cancelling;
static bool cancel_later;
static pthread_mutex_t detach_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t detach_ended = PTHREAD_COND_INITIALIZER;
static enum { RUNNING, HEARD, NEVER_HEARD } detach_outcome;

static void cancel_detached(void) {
  json_t *id = json_integer(DETACH_ID);
  tg_mcp_inflight_cancel(cancelling, id);
  json_decref(id);
}

static int cancelled_as_it_detaches(tg_call_ctx *cx, json_t *args, json_t **ret) {
  const tg_client_channel *ch = cx->client;
  if (!cancel_later) cancel_detached();
  /* TG_E_IO when the request's cancellation was seen first: then it never was a task. */
  int r = ch->detach(ch->self);
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_MS;
  while (r == TG_OK && !ch->cancelled(ch->self) && tg_monotonic_ms() < deadline)
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  pthread_mutex_lock(&detach_lock);
  detach_outcome = r < 0 || ch->cancelled(ch->self) ? HEARD : NEVER_HEARD;
  pthread_cond_broadcast(&detach_ended);
  pthread_mutex_unlock(&detach_lock);
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL, "The client cancelled the call");
}

/* A tool that asks nothing of the client: it records a row, says it runs, then works until
 * its call is cancelled. */
static pthread_mutex_t await_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t await_started = PTHREAD_COND_INITIALIZER;
static bool awaiting;
/* Set: once it learnt of its cancellation, the tool waits for held to be cleared before it
 * ends, so that its request stays in flight meanwhile. */
static bool held;

static void release_held(void) {
  pthread_mutex_lock(&await_lock);
  held = false;
  pthread_cond_broadcast(&await_started);
  pthread_mutex_unlock(&await_lock);
}

static int await_cancel(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)args;
  (void)ret;
  int r = tg_activity(cx, "ASKED", NULL, "works until cancelled", NULL);
  if (r < 0) return r;
  pthread_mutex_lock(&await_lock);
  awaiting = true;
  pthread_cond_broadcast(&await_started);
  pthread_mutex_unlock(&await_lock);
  const tg_client_channel *ch = cx->client;
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_MS;
  while (!ch->cancelled(ch->self) && tg_monotonic_ms() < deadline)
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  pthread_mutex_lock(&await_lock);
  while (held && tg_monotonic_ms() < deadline)
    tg_timed_wait(&await_started, &await_lock, deadline - tg_monotonic_ms());
  pthread_mutex_unlock(&await_lock);
  return tg_fail(cx, TG_ERR_PRECONDITION_FAILED, NULL, "The client cancelled the call");
}

/* A tool that never looks for its cancellation: it records a row, its request (number
 * DEAF_ID) is cancelled in the table the test names while it works, and it ends as if all
 * went well. */
#define DEAF_ID 8
static int deaf_write(tg_call_ctx *cx, json_t *args, json_t **ret) {
  (void)args;
  int r = tg_activity(cx, "ASKED", NULL, "works deaf to its cancellation", NULL);
  if (r < 0) return r;
  json_t *id = json_integer(DEAF_ID);
  tg_mcp_inflight_cancel(cancelling, id);
  json_decref(id);
  *ret = json_pack("{s:b}", "ok", 1);
  return *ret ? TG_OK : TG_E_NOMEM;
}

static const char kit_spec[] =
    "{\"provider\":\"kit\",\"tools\":["
    "{\"name\":\"test.ask.write\",\"description\":\"Records a row, then asks the client.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"write\",\"risk\":\"low\",\"permissions\":[],"
    "\"flags\":[\"interactive\"],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.await.cancel\",\"description\":\"Records a row, then works until cancelled.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"write\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.deaf.write\",\"description\":\"Records a row, deaf to its cancellation.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"write\",\"risk\":\"low\",\"permissions\":[],"
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}},"
    "{\"name\":\"test.cancelled.detach\",\"description\":\"Cancelled as it becomes a task.\","
    "\"surfaces\":[\"mcp\"],\"effect\":\"read\",\"risk\":\"low\",\"permissions\":[],"
    "\"flags\":[\"interactive\"],\"taskSupport\":\"optional\","
    "\"inputSchema\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}}]}";
static const tg_handler_entry kit_handlers[] = {{"test.ask.write", ask_write},
                                                {"test.await.cancel", await_cancel},
                                                {"test.deaf.write", deaf_write},
                                                {"test.cancelled.detach", cancelled_as_it_detaches}};
static const tg_provider kit = {.name = "kit", .spec_json = kit_spec, .handlers = kit_handlers,
                                .n_handlers = 4};

typedef struct world {
  fixture *f;
  char agent[TG_UUID_LEN + 1]; /* holds tasks.assign, so its tool list can shrink */
  tg_mcp_server srv;
  tg_mcp_session session;
  tg_mcp_inflight *inflight;
  tg_mcp_watch *watch;
  tg_mcp_io io;
  tg_mcp_request req;
  json_t *sent;       /* what the server sent outside replies, in order */
  json_t *cancel_msg; /* delivered by the fake client while a call waits for its answer */
  bool full;          /* where notifications go is full: sending them fails */
} world;

static int capture(void *self, json_t *msg) {
  world *w = self;
  if (w->full) {
    json_decref(msg);
    return TG_E_TOO_LARGE;
  }
  return json_array_append_new(w->sent, msg) < 0 ? TG_E_NOMEM : TG_OK;
}

static json_t *handle(world *w, const char *text, tg_mcp_reply *reply) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  tg_mcp_reply local;
  if (!reply) reply = &local;
  assert_int_equal(tg_mcp_handle(&w->srv, &w->req, &msg, reply), 0);
  tg_rpc_msg_done(&msg);
  json_t *message = reply->text ? tg_test_json(reply->text) : NULL;
  free(reply->text);
  reply->text = NULL;
  return message;
}

/* The client cancels the call while it waits, then answers all the same (the answer and the
 * cancellation crossed): the call must fail regardless. */
static int cancel_then_answer(void *self, json_t *request, json_t **ret) {
  world *w = self;
  json_array_append_new(w->sent, request);
  if (w->cancel_msg) {
    char *text = json_dumps(w->cancel_msg, JSON_COMPACT);
    assert_null(handle(w, text, NULL));
    free(text);
  }
  *ret = json_pack("{s:s,s:O,s:{s:s,s:{s:s,s:s},s:s}}", "jsonrpc", "2.0", "id",
                   json_object_get(request, "id"), "result", "role", "assistant", "content",
                   "type", "text", "text", "hello", "model", "m");
  return TG_OK;
}

static world *world_new(const tg_provider *extra) {
  world *w = calloc(1, sizeof *w);
  w->f = fixture_new(extra);
  fixture_agent(w->f, "{\"slug\":\"bot\",\"grants\":[\"canAssignTasks\"]}", w->agent);
  w->srv = (tg_mcp_server){.fixtures = true, .name = "toolgate", .version = "test", .list_changes = true};
  assert_int_equal(tg_mcp_server_prepare(&w->srv, &w->f->env), 0);
  tg_mcp_session_init(&w->session);
  assert_int_equal(tg_mcp_inflight_new(NULL, NULL, &w->inflight), 0);
  assert_int_equal(tg_mcp_watch_new(capture, w, &w->watch), 0);
  w->sent = json_array();
  w->io = (tg_mcp_io){.self = w, .send = capture, .ask = cancel_then_answer};
  w->req = (tg_mcp_request){.env = &w->f->env, .principal_id = w->agent, .session = &w->session,
                            .io = &w->io, .inflight = w->inflight, .watch = w->watch};
  return w;
}

static int setup_kit(void **state) {
  *state = world_new(&kit);
  return 0;
}

static int setup_fixtures(void **state) {
  *state = world_new(&tg_provider_conformance);
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  tg_mcp_tasks_test_later_ms = 0; /* a failed test's clock of the tasks' expiry */
  tg_mcp_watch_free(w->watch);
  tg_mcp_inflight_free(w->inflight);
  tg_mcp_session_done(&w->session);
  tg_mcp_server_done(&w->srv);
  json_decref(w->sent);
  json_decref(w->cancel_msg);
  fixture_free(w->f);
  free(w);
  return 0;
}

static const char *method_at(json_t *sent, size_t i) {
  return json_string_value(json_object_get(json_array_get(sent, i), "method"));
}

static long asked_rows(world *w) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(w->f->db,
                                   "SELECT COUNT(*) AS n FROM activity_log WHERE action_type = 'ASKED'",
                                   NULL, &row),
                   0);
  long n = (long)json_integer_value(json_object_get(row, "n"));
  json_decref(row);
  return n;
}

/* ---- the transport-neutral dispatch ---- */

static void test_cancelled_call_gets_no_answer_and_writes_nothing(void **state) {
  world *w = *state;
  json_decref(handle(w, INITIALIZE, NULL));
  assert_null(handle(w, INITIALIZED, NULL));
  long asked = asked_rows(w);
  long logs = fixture_count(w->f, "agent_run_logs");
  w->cancel_msg = json_loads(CANCEL(2), 0, NULL);
  tg_mcp_reply reply;
  assert_null(handle(w, ASK_WRITE(2), &reply));
  assert_false(reply.subscribed);
  assert_string_equal(method_at(w->sent, 0), "sampling/createMessage");
  assert_int_equal(asked_rows(w), asked);
  /* The failed call is still audited, its run as cancelled. */
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs + 1);
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM agent_runs WHERE"
                                             " status = 'cancelled'", NULL),
                   1);
  /* A cancellation naming another request, or one already answered, changes nothing. */
  json_decref(w->cancel_msg);
  w->cancel_msg = json_loads(CANCEL(99), 0, NULL);
  assert_null(handle(w, CANCEL(3), NULL));
  json_t *r = handle(w, ASK_WRITE(3), NULL);
  assert_int_equal(json_integer_value(json_object_get(r, "id")), 3);
  assert_null(json_object_get(json_object_get(r, "result"), "isError"));
  json_decref(r);
  assert_int_equal(asked_rows(w), asked + 1);
}

/* A call cancelled while its handler worked, deaf to it, writes nothing all the same: the
 * gate finds the cancellation before the commit. No answer goes out; its run is cancelled. */
static void test_cancelled_call_deaf_to_it_writes_nothing(void **state) {
  world *w = *state;
  cancelling = w->inflight;
  json_decref(handle(w, INITIALIZE, NULL));
  long asked = asked_rows(w);
  long cancelled_runs = fixture_count_where(
      w->f, "SELECT COUNT(*) AS n FROM agent_runs WHERE status = 'cancelled'", NULL);
  assert_null(handle(w,
                     "{\"jsonrpc\":\"2.0\",\"id\":8," /* DEAF_ID */
                     "\"method\":\"tools/call\",\"params\":{\"name\":\"test_deaf_write\"}}",
                     NULL));
  assert_int_equal(asked_rows(w), asked);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_runs WHERE"
                                       " status = 'cancelled'",
                                       NULL),
                   cancelled_runs + 1);
  /* Not cancelled (another request's id), the same call writes its row. */
  json_t *r = handle(w,
                     "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\","
                     "\"params\":{\"name\":\"test_deaf_write\"}}",
                     NULL);
  assert_null(json_object_get(json_object_get(r, "result"), "isError"));
  json_decref(r);
  assert_int_equal(asked_rows(w), asked + 1);
}

/* A request to the client it did not declare it can answer is never sent: the call fails,
 * and what it wrote before asking is rolled back. */
static void test_an_ask_the_client_did_not_declare_is_not_sent(void **state) {
  world *w = *state;
  json_decref(handle(w,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                     "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"roots\":{}}}}",
                     NULL));
  long asked = asked_rows(w);
  json_t *r = handle(w, ASK_WRITE(2), NULL);
  assert_true(json_is_true(json_object_get(json_object_get(r, "result"), "isError")));
  json_decref(r);
  assert_int_equal(json_array_size(w->sent), 0);
  assert_int_equal(asked_rows(w), asked);
}

/* A call cancelled while its transport held it waiting for a thread is not served: its
 * handler never runs, nothing is written, and no answer goes out. Nor is a request that would
 * have been refused before it was served (an unknown method, one of the other revision, a
 * discover without _meta): the client expects no answer to any. */
static void test_call_cancelled_while_queued_is_not_served(void **state) {
  world *w = *state;
  json_decref(handle(w, INITIALIZE, NULL));
  long logs = fixture_count(w->f, "agent_run_logs");
  static const char *const queued[] = {
      ASK_WRITE(4),
      "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"foo/bar\"}",
      "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
      "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
      "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
      "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"server/discover\"}"};
  json_t *id = json_integer(4);
  for (size_t i = 0; i < sizeof queued / sizeof *queued; i++) {
    assert_int_equal(tg_mcp_inflight_begin(w->inflight, id), 0); /* the transport queues it */
    assert_true(tg_mcp_inflight_cancel(w->inflight, id));
    json_t *answer = handle(w, queued[i], NULL);
    if (answer) fail_msg("%s was answered: %s", queued[i], json_dumps(answer, 0));
    assert_true(tg_mcp_inflight_end(w->inflight, id));
  }
  assert_int_equal(json_array_size(w->sent), 0); /* the handler never asked */
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs);
  /* A request that claims 2026-07-28 pins its connection, whatever then becomes of it. */
  tg_mcp_session_done(&w->session); /* a new connection */
  assert_int_equal(tg_mcp_inflight_begin(w->inflight, id), 0);
  assert_true(tg_mcp_inflight_cancel(w->inflight, id));
  assert_null(handle(w, queued[2], NULL));
  assert_true(tg_mcp_inflight_end(w->inflight, id));
  assert_int_equal(w->session.era, TG_MCP_ERA_MODERN);
  json_decref(id);
}

/* A request cancelled just as its handler makes it a task gets no answer, and the task,
 * which no client can know of, hears of the cancellation and ends. */
/* reply (stolen) answers a call by making it a task. */
static void assert_task_started(json_t *reply) {
  assert_string_equal(json_string_value(json_object_get(json_object_get(reply, "result"),
                                                        "resultType")),
                      "task");
  json_decref(reply);
}

#define DETACHING_CALL                                                                    \
  "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\"," /* DETACH_ID */                    \
  "\"params\":{\"name\":\"test_cancelled_detach\",\"_meta\":{"                                 \
  "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","                                 \
  "\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":"                              \
  "{\"io.modelcontextprotocol/tasks\":{}}}}}}"

/* How the call of test.cancelled.detach ended: whether its handler heard it was cancelled. */
static int detached_outcome(void) {
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_MS + 5000;
  pthread_mutex_lock(&detach_lock);
  for (int64_t left; detach_outcome == RUNNING && (left = deadline - tg_monotonic_ms()) > 0;)
    tg_timed_wait(&detach_ended, &detach_lock, left);
  int outcome = detach_outcome;
  pthread_mutex_unlock(&detach_lock);
  return outcome;
}

static void test_task_cancelled_as_it_detaches(void **state) {
  world *w = *state;
  cancelling = w->inflight;
  cancel_later = false;
  detach_outcome = RUNNING;
  assert_null(handle(w, DETACHING_CALL, NULL));
  assert_int_equal(detached_outcome(), HEARD);
}

/* A request cancelled once its task was made, past what the task's start looks at, gets no
 * answer either: the task, which no client can know of, is cancelled and ends. */
static void test_task_cancelled_once_made(void **state) {
  world *w = *state;
  cancelling = w->inflight;
  cancel_later = true;
  detach_outcome = RUNNING;
  tg_mcp_tasks_test_started = cancel_detached;
  assert_null(handle(w, DETACHING_CALL, NULL));
  tg_mcp_tasks_test_started = NULL;
  assert_int_equal(detached_outcome(), HEARD);
}

/* The same for a client that went away once its task was made (a stateless HTTP call whose
 * connection closed, or only half-closed): it gets no answer, as a request cancelled. */
static atomic_bool went_away;
static void go_away(void) { atomic_store(&went_away, true); }
static bool client_gone(void *arg) {
  (void)arg;
  return atomic_load(&went_away);
}

static void test_task_of_a_client_gone_once_made(void **state) {
  world *w = *state;
  cancelling = w->inflight;
  cancel_later = true;
  detach_outcome = RUNNING;
  atomic_store(&went_away, false);
  w->req.gone = client_gone;
  tg_mcp_tasks_test_started = go_away;
  assert_null(handle(w, DETACHING_CALL, NULL));
  tg_mcp_tasks_test_started = NULL;
  assert_int_equal(detached_outcome(), HEARD);
}

static void test_list_changed_follows_the_database(void **state) {
  world *w = *state;
  json_t *r = handle(w, INITIALIZE, NULL);
  json_t *caps = json_object_get(json_object_get(r, "result"), "capabilities");
  assert_true(json_is_true(json_object_get(json_object_get(caps, "tools"), "listChanged")));
  json_decref(r);
  /* Nobody listens before initialized; the first check then takes the baseline. */
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_null(handle(w, INITIALIZED, NULL));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 0);
  /* A grant no tool offered on MCP needs leaves the list as it was: no change is told. */
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.grant.add",
                                "{\"agentSlug\":\"bot\",\"permission\":\"runs.read\"}", NULL, &res),
                   0);
  tg_call_result_done(&res);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 0);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
  assert_string_equal(method_at(w->sent, 0), "notifications/tools/list_changed");
  assert_null(json_object_get(json_array_get(w->sent, 0), "params"));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
}

/* A change that could not be announced is announced at a later check; its failure is
 * reported once. */
static void test_list_changed_sent_again_until_it_goes_out(void **state) {
  world *w = *state;
  json_decref(handle(w, INITIALIZE, NULL));
  assert_null(handle(w, INITIALIZED, NULL));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  w->full = true;
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), TG_E_TOO_LARGE);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  w->full = false;
  assert_int_equal(json_array_size(w->sent), 0);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
  assert_string_equal(method_at(w->sent, 0), "notifications/tools/list_changed");
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
}

/* A change owed to a listener that left is not announced to the next one. */
static void test_owed_change_not_sent_to_a_new_listener(void **state) {
  world *w = *state;
  _cleanup_json_ json_t *id = json_string("s1");
  _cleanup_json_ json_t *filter = json_pack("{s:b}", "toolsListChanged", 1);
  assert_int_equal(tg_mcp_watch_subscribe(w->watch, id, filter, NULL, NULL, w->agent), 0);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  w->full = true;
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), TG_E_TOO_LARGE);
  w->full = false;
  assert_true(tg_mcp_watch_unsubscribe(w->watch, id));
  assert_int_equal(tg_mcp_watch_subscribe(w->watch, id, filter, NULL, NULL, w->agent), 0);
  size_t acknowledged = json_array_size(w->sent);
  for (int i = 0; i < 2; i++)
    assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), acknowledged);
}

static json_t *subscription_of(json_t *notification) {
  return json_object_get(json_object_get(json_object_get(notification, "params"), "_meta"),
                         "io.modelcontextprotocol/subscriptionId");
}

static void test_listen_acknowledges_filters_and_ends(void **state) {
  world *w = *state;
  tg_mcp_reply reply;
  assert_null(handle(w,
                     "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"subscriptions/listen\","
                     "\"params\":{" MODERN_META ",\"notifications\":{\"promptsListChanged\":true,"
                     "\"resourcesListChanged\":true}}}",
                     &reply));
  assert_true(reply.subscribed);
  assert_int_equal(reply.http_status, 200);
  /* Acknowledged first, with only what is honoured. */
  json_t *ack = json_array_get(w->sent, 0);
  assert_string_equal(method_at(w->sent, 0), "notifications/subscriptions/acknowledged");
  assert_string_equal(json_string_value(subscription_of(ack)), "s1");
  json_t *honoured = json_object_get(json_object_get(ack, "params"), "notifications");
  assert_int_equal(json_object_size(honoured), 1);
  assert_true(json_is_true(json_object_get(honoured, "promptsListChanged")));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  /* A tool change does not reach a prompts-only stream; a prompt change does, tagged. */
  json_t *r = handle(w, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                        "\"name\":\"test_trigger_tool_change\"," MODERN_META "}}",
                     NULL);
  assert_null(json_object_get(json_object_get(r, "result"), "isError"));
  json_decref(r);
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
  json_decref(handle(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                        "\"name\":\"test_trigger_prompt_change\"," MODERN_META "}}",
                     NULL));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 2);
  assert_string_equal(method_at(w->sent, 1), "notifications/prompts/list_changed");
  assert_string_equal(json_string_value(subscription_of(json_array_get(w->sent, 1))), "s1");
  /* Cancelling the listen request ends the subscription, without an answer. */
  assert_null(handle(w, CANCEL("s1"), NULL));
  assert_true(tg_mcp_watch_touch("notifications/prompts/list_changed", w->agent));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 2);
}

/* What a watch sends, as the client's cancellation of the listen request crosses its
 * acknowledgement (the cancellation is read on another thread over stdio). */
static int capture_then_cancel(void *self, json_t *msg) {
  world *w = self;
  json_t *id = subscription_of(msg);
  if (id) tg_mcp_inflight_cancel(w->inflight, id);
  return capture(self, msg);
}

/* A listen request cancelled as it subscribes gets no answer, and its subscription ends. */
static void test_listen_cancelled_as_it_subscribes(void **state) {
  world *w = *state;
  tg_mcp_watch_free(w->watch);
  assert_int_equal(tg_mcp_watch_new(capture_then_cancel, w, &w->watch), 0);
  w->req.watch = w->watch;
  tg_mcp_reply reply;
  assert_null(handle(w,
                     "{\"jsonrpc\":\"2.0\",\"id\":\"s2\",\"method\":\"subscriptions/listen\","
                     "\"params\":{" MODERN_META ",\"notifications\":{\"promptsListChanged\":true}}}",
                     &reply));
  assert_false(reply.subscribed);
  assert_string_equal(method_at(w->sent, 0), "notifications/subscriptions/acknowledged");
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0); /* the baseline */
  json_decref(handle(w, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                        "\"name\":\"test_trigger_prompt_change\"," MODERN_META "}}",
                     NULL));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1); /* the acknowledgement alone */
}

/* A list changed outside the database (a trigger tool) is announced to the watches of the
 * principal that changed it, not to another's. */
static void test_a_touch_reaches_its_principal_alone(void **state) {
  world *w = *state;
  tg_mcp_watch_legacy(w->watch);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0); /* the baseline */
  assert_true(tg_mcp_watch_touch("notifications/tools/list_changed", w->f->owner));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 0);
  assert_true(tg_mcp_watch_touch("notifications/prompts/list_changed", w->agent));
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
  assert_string_equal(method_at(w->sent, 0), "notifications/prompts/list_changed");
}

/* Prompts are offered to principals that act: a watch of a server that offers them
 * announces that they changed as its agent is paused or started; one of a server without
 * prompts announces its tools alone. */
static void test_prompts_change_as_their_principal_acts(void **state) {
  world *w = *state;
  static const char *const set[] = {"UPDATE agents SET status = 'paused' WHERE slug = 'bot'",
                                    "UPDATE agents SET status = 'active' WHERE slug = 'bot'"};
  tg_mcp_watch_legacy(w->watch);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0); /* the baseline */
  assert_int_equal(tg_db_exec(w->f->db, set[0], NULL, NULL), 0);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 1);
  assert_string_equal(method_at(w->sent, 0), "notifications/tools/list_changed");
  tg_mcp_watch_prompts(w->watch);
  assert_int_equal(tg_db_exec(w->f->db, set[1], NULL, NULL), 0);
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 3);
  assert_string_equal(method_at(w->sent, 1), "notifications/tools/list_changed");
  assert_string_equal(method_at(w->sent, 2), "notifications/prompts/list_changed");
  /* A change of grants that leaves it acting changes no prompt. */
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  assert_int_equal(tg_mcp_watch_check(w->watch, &w->f->env, w->agent), 0);
  assert_int_equal(json_array_size(w->sent), 4);
  assert_string_equal(method_at(w->sent, 3), "notifications/tools/list_changed");
}

static void test_no_list_changes_without_a_watch(void **state) {
  world *w = *state;
  /* What an HTTP transport gets until it delivers list changes. */
  w->srv.list_changes = false;
  w->req.watch = NULL;
  tg_mcp_reply reply;
  json_t *r = handle(w, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}",
                     &reply);
  json_t *caps = json_object_get(json_object_get(r, "result"), "capabilities");
  assert_null(json_object_get(json_object_get(caps, "tools"), "listChanged"));
  assert_null(json_object_get(json_object_get(caps, "prompts"), "listChanged"));
  json_decref(r);
  r = handle(w,
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"subscriptions/listen\",\"params\":{" MODERN_META
             ",\"notifications\":{\"toolsListChanged\":true}}}",
             &reply);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                   TG_RPC_METHOD_NOT_FOUND);
  assert_int_equal(reply.http_status, 404);
  json_decref(r);
}

/* The error code of answer, and its message in *message. */
static json_int_t error_code(json_t *answer, const char **message) {
  json_t *error = json_object_get(answer, "error");
  if (message) *message = json_string_value(json_object_get(error, "message"));
  return json_integer_value(json_object_get(error, "code"));
}

/* A session that negotiated 2025-03-26 takes JSON-RPC batches (2025-06-18 took them out):
 * their messages are served in order, and one answer holds the replies and the errors of
 * elements that are no message. The handshake and 2026-07-28 requests stand alone; a
 * response goes to its transport, which delivers it; a request cancelled before its turn
 * gets no answer. */
static void test_batch_served_on_2025_03_26(void **state) {
  world *w = *state;
  json_decref(handle(w, INITIALIZE_AT("2025-03-26"), NULL));
  long asked = asked_rows(w);
  tg_mcp_reply reply;
  json_t *r = handle(w,
                     "[" INITIALIZED "," PING(2) "," ASK_WRITE(3) ",7," INITIALIZE_AT("2025-03-26")
                     ",{\"jsonrpc\":\"2.0\",\"id\":44,\"result\":{}}," CANCEL(6) "," LIST(6) "]",
                     &reply);
  assert_int_equal(reply.http_status, 200);
  assert_int_equal(json_array_size(r), 4);
  static const json_int_t ids[] = {2, 3, -1, 1};
  for (size_t i = 0; i < 4; i++) {
    json_t *answer = json_array_get(r, i);
    json_t *id = json_object_get(answer, "id");
    if (ids[i] < 0) assert_null(id);
    else assert_int_equal(json_integer_value(id), ids[i]);
  }
  json_t *call = json_object_get(json_array_get(r, 1), "result");
  assert_null(json_object_get(call, "isError"));
  const char *why = NULL;
  assert_int_equal(error_code(json_array_get(r, 3), &why), TG_RPC_INVALID_REQUEST);
  assert_non_null(strstr(why, "initialize"));
  json_decref(r);
  assert_true(w->session.initialized);
  assert_int_equal(asked_rows(w), asked + 1);
  assert_string_equal(method_at(w->sent, 0), "sampling/createMessage"); /* the call asked */
  /* Notifications alone get no answer. */
  assert_null(handle(w, "[" INITIALIZED "]", &reply));
  assert_int_equal(reply.http_status, 202);
}

/* A batch's answer is built whole, so it is bounded: a reply past the bound is replaced by
 * an error naming its request, which says it was served, and the replies around it go
 * out. */
static void test_batch_answer_bounded(void **state) {
  world *w = *state;
  w->srv.batch_answer_max = 1024; /* two pings fit; a tool list does not */
  json_decref(handle(w, INITIALIZE_AT("2025-03-26"), NULL));
  json_t *r = handle(w, "[" PING(2) "," LIST(3) "," PING(4) "]", NULL);
  assert_int_equal(json_array_size(r), 3);
  assert_non_null(json_object_get(json_array_get(r, 0), "result"));
  json_t *listed = json_array_get(r, 1);
  assert_int_equal(json_integer_value(json_object_get(listed, "id")), 3);
  const char *why = NULL;
  assert_int_equal(error_code(listed, &why), TG_RPC_INTERNAL_ERROR);
  assert_non_null(strstr(why, "The request was served, but its result is too large"));
  assert_non_null(json_object_get(json_array_get(r, 2), "result"));
  json_decref(r);
}

/* On a later revision a batch is refused: each request in it gets its own error, and nothing
 * in it is served or written. */
static void test_batch_refused_past_2025_03_26(void **state) {
  world *w = *state;
  json_decref(handle(w, INITIALIZE, NULL));
  long asked = asked_rows(w);
  long logs = fixture_count(w->f, "agent_run_logs");
  tg_mcp_reply reply;
  json_t *r = handle(w, "[" INITIALIZED "," ASK_WRITE(3) "," PING(4) "]", &reply);
  assert_int_equal(reply.http_status, 400);
  assert_int_equal(json_array_size(r), 2);
  const char *why = NULL;
  assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 0), "id")), 3);
  assert_int_equal(error_code(json_array_get(r, 0), &why), TG_RPC_INVALID_REQUEST);
  assert_non_null(strstr(why, "2025-03-26"));
  assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 1), "id")), 4);
  json_decref(r);
  assert_false(w->session.initialized);
  assert_int_equal(asked_rows(w), asked);
  assert_int_equal(fixture_count(w->f, "agent_run_logs"), logs);
  assert_int_equal(json_array_size(w->sent), 0);
}

/* A 2026-07-28 request stands alone: a batch holding one is refused whole, each of its
 * requests with its own error, and nothing in it runs. */
static void test_batch_with_a_2026_request_refused(void **state) {
  world *w = *state;
  json_decref(handle(w, INITIALIZE_AT("2025-03-26"), NULL));
  long asked = asked_rows(w);
  tg_mcp_reply reply;
  json_t *r = handle(w,
                     "[" ASK_WRITE(3) ",{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\","
                     "\"params\":{" MODERN_META "}}]",
                     &reply);
  assert_int_equal(reply.http_status, 400);
  assert_int_equal(json_array_size(r), 2);
  const char *why = NULL;
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(error_code(json_array_get(r, i), &why), TG_RPC_INVALID_REQUEST);
    assert_non_null(strstr(why, "2026-07-28"));
  }
  json_decref(r);
  assert_int_equal(asked_rows(w), asked);
  assert_int_equal(json_array_size(w->sent), 0);
}

/* ---- stdio end to end ---- */

typedef struct stdio_run {
  world *w;
  const char *token; /* that names w->agent, or NULL */
  pthread_t thread;
  FILE *in, *out;        /* the server's ends */
  int to_server, from_server;
  int stop[2]; /* the server's stop_fd, and its end that tells it to stop */
  char buf[1 << 16];
  size_t len;
  int status;
} stdio_run;

static void *serve_main(void *arg) {
  stdio_run *s = arg;
  /* A connection of its own, as the process it stands for has: the test's thread uses the
   * fixture's meanwhile. */
  tg_env env = s->w->f->env;
  env.db = NULL;
  char *why = NULL;
  s->status = tg_db_open(s->w->f->dir, &env.db, &why);
  free(why);
  if (s->status == TG_OK)
    s->status = tg_mcp_stdio_serve(&s->w->srv, &env, s->w->agent, s->token, s->in, s->out,
                                   s->stop[0]);
  tg_db_close(env.db);
  fclose(s->in);
  fclose(s->out);
  return NULL;
}

/* Serves stdio as w->agent, named by token (NULL: by its slug), on pipes or, with sockets,
 * on non-blocking socket pairs (as Node gives a child). */
static stdio_run *stdio_start_on(world *w, const char *token, bool sockets) {
  stdio_run *s = calloc(1, sizeof *s);
  s->token = token;
  int to[2], from[2];
  if (sockets) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, to), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, from), 0);
    assert_int_equal(fcntl(to[0], F_SETFL, O_NONBLOCK), 0);
    assert_int_equal(fcntl(from[1], F_SETFL, O_NONBLOCK), 0);
  } else {
    assert_int_equal(pipe(to), 0);
    assert_int_equal(pipe(from), 0);
  }
  assert_int_equal(pipe(s->stop), 0);
  s->w = w;
  s->in = fdopen(to[0], "r");
  s->out = fdopen(from[1], "w");
  s->to_server = to[1];
  s->from_server = from[0];
  assert_int_equal(pthread_create(&s->thread, NULL, serve_main, s), 0);
  return s;
}

static stdio_run *stdio_start_with(world *w, const char *token) {
  return stdio_start_on(w, token, false);
}

static stdio_run *stdio_start(world *w) { return stdio_start_with(w, NULL); }

static void stdio_send(stdio_run *s, const char *text) {
  size_t n = strlen(text);
  assert_int_equal(write(s->to_server, text, n), (ssize_t)n);
  assert_int_equal(write(s->to_server, "\n", 1), 1);
}

/* The next line the server writes, parsed. */
static json_t *stdio_next(stdio_run *s) {
  char *nl;
  while (!(nl = memchr(s->buf, '\n', s->len))) {
    struct pollfd p = {.fd = s->from_server, .events = POLLIN};
    if (poll(&p, 1, HANG_GUARD_MS) != 1) fail_msg("the server hung");
    ssize_t n = read(s->from_server, s->buf + s->len, sizeof s->buf - s->len);
    if (n <= 0) fail_msg("the server closed its output");
    s->len += (size_t)n;
  }
  *nl = 0;
  json_t *msg = json_loads(s->buf, 0, NULL);
  assert_non_null(msg);
  size_t used = (size_t)(nl - s->buf) + 1;
  memmove(s->buf, s->buf + used, s->len - used);
  s->len -= used;
  return msg;
}

static void expect_answer(stdio_run *s, json_int_t id) {
  json_t *msg = stdio_next(s);
  if (json_integer_value(json_object_get(msg, "id")) != id || !json_object_get(msg, "result"))
    fail_msg("expected the answer to %lld, got %s", (long long)id, json_dumps(msg, JSON_COMPACT));
  json_decref(msg);
}

/* The next line answers a batch: in order, a reply to each of the n ids; returned for more
 * checks. */
static json_t *expect_batch_answer(stdio_run *s, const json_int_t *ids, size_t n) {
  json_t *answers = stdio_next(s);
  assert_int_equal(json_array_size(answers), n);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(json_integer_value(json_object_get(json_array_get(answers, i), "id")), ids[i]);
  return answers;
}

/* Frees s, whose server ended: the status it ended with. */
static int stdio_done(stdio_run *s) {
  int status = s->status;
  if (s->to_server >= 0) close(s->to_server);
  close(s->from_server);
  close(s->stop[0]);
  close(s->stop[1]);
  free(s);
  return status;
}

/* Waits for the server's thread (its input closed already, or the server ending on its own)
 * and frees s: the status it ended with. */
static int stdio_join(stdio_run *s) {
  assert_int_equal(pthread_join(s->thread, NULL), 0);
  return stdio_done(s);
}

/* Ends the connection as a client does, closing the server's input. */
static void stdio_stop(stdio_run *s) {
  close(s->to_server);
  s->to_server = -1;
  assert_int_equal(stdio_join(s), 0);
}

/* A stdio connection (named by token; NULL: by the agent's slug) after its handshake
 * (initialize, answered, and notifications/initialized). */
static stdio_run *stdio_handshaken(world *w, const char *token, const char *initialize) {
  stdio_run *s = stdio_start_with(w, token);
  stdio_send(s, initialize);
  expect_answer(s, 1);
  stdio_send(s, INITIALIZED);
  return s;
}

/* A stdio connection (named by token; NULL: by the agent's slug) after its handshake
 * (initialize), with the call that call starts (of test_ask_write) waiting for the client's
 * answer to its sampling request, whose id goes to *ask_id unless it is NULL. */
static stdio_run *start_asking_call_with(world *w, const char *token, const char *initialize,
                                         const char *call, json_int_t *ask_id) {
  stdio_run *s = stdio_handshaken(w, token, initialize);
  stdio_send(s, call);
  json_t *ask = stdio_next(s);
  assert_string_equal(json_string_value(json_object_get(ask, "method")), "sampling/createMessage");
  if (ask_id) *ask_id = json_integer_value(json_object_get(ask, "id"));
  json_decref(ask);
  return s;
}

/* The same on 2025-11-25, with call 2 asking. */
static stdio_run *start_asking_call(world *w) {
  return start_asking_call_with(w, NULL, INITIALIZE, ASK_WRITE(2), NULL);
}

/* Answers the server's sampling request ask_id; in a batch ahead of then, unless then is
 * NULL. */
static void send_sampling_answer(stdio_run *s, json_int_t ask_id, const char *then) {
  char answer[512];
  snprintf(answer, sizeof answer,
           "%s{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"role\":\"assistant\",\"content\":{"
           "\"type\":\"text\",\"text\":\"hi\"},\"model\":\"m\"}}%s%s%s",
           then ? "[" : "", (long long)ask_id, then ? "," : "", then ? then : "", then ? "]" : "");
  stdio_send(s, answer);
}

/* Whether msg withdraws the server's request to the client (notifications/cancelled) for
 * reason. */
static bool withdraws(json_t *msg, const char *reason) {
  json_t *params = json_object_get(msg, "params");
  return json_is_string(json_object_get(msg, "method")) &&
         strcmp(json_string_value(json_object_get(msg, "method")), "notifications/cancelled") == 0 &&
         json_object_get(params, "requestId") &&
         strcmp(json_string_value(json_object_get(params, "reason")), reason) == 0;
}

/* The next line answers request id, a call that failed: its error message, to release. */
static json_t *expect_failed_call(stdio_run *s, json_int_t id) {
  json_t *answer = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(answer, "id")), id);
  json_t *result = json_object_get(answer, "result");
  assert_true(json_is_true(json_object_get(result, "isError")));
  json_t *error = json_object_get(json_object_get(result, "structuredContent"), "error");
  json_t *message = json_incref(json_object_get(error, "message"));
  json_decref(answer);
  return message;
}

/* The same for a call that learnt it was cancelled. */
static void expect_cancelled_call(stdio_run *s, json_int_t id) {
  json_t *message = expect_failed_call(s, id);
  assert_non_null(strstr(json_string_value(message), "cancelled"));
  json_decref(message);
}

/* The next line withdraws the server's question, as its call no longer waits for it. */
static void expect_withdrawn(stdio_run *s) {
  json_t *withdrawn = stdio_next(s);
  assert_true(withdraws(withdrawn, "The call no longer waits for it"));
  json_decref(withdrawn);
}

/* A 2025-03-26 connection takes batches, each answered on one line. A response in a batch
 * reaches the call waiting for it at once, while the rest of that batch waits its turn
 * behind the call. */
static void test_stdio_batches(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  json_int_t ask = 0;
  stdio_run *s = start_asking_call_with(w, NULL, INITIALIZE_AT("2025-03-26"),
                                        "[" PING(2) "," ASK_WRITE(3) "]", &ask);
  send_sampling_answer(s, ask, PING(4));
  json_t *first = expect_batch_answer(s, (json_int_t[]){2, 3}, 2);
  assert_null(json_object_get(json_object_get(json_array_get(first, 1), "result"), "isError"));
  json_decref(first);
  json_decref(expect_batch_answer(s, (json_int_t[]){4}, 1));
  /* A cancellation in a batch reaches a request of it in the batch's order, as over HTTP:
   * one still to come, not one answered already. */
  stdio_send(s, "[" CANCEL(6) "," LIST(6) "," PING(7) "]");
  json_decref(expect_batch_answer(s, (json_int_t[]){7}, 1));
  stdio_send(s, "[" PING(8) "," CANCEL(8) "]");
  json_decref(expect_batch_answer(s, (json_int_t[]){8}, 1));
  /* A 2026-07-28 request on the connection is refused, and leaves it the revision it
   * negotiated. */
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}");
  json_t *refused = stdio_next(s);
  assert_int_equal(error_code(refused, NULL), TG_RPC_UNSUPPORTED_VERSION);
  json_decref(refused);
  stdio_send(s, "[" PING(10) "]");
  json_t *pong = expect_batch_answer(s, (json_int_t[]){10}, 1);
  assert_non_null(json_object_get(json_array_get(pong, 0), "result"));
  json_decref(pong);
  /* Answered, a batch's requests are no longer in flight: a cancellation naming one is
   * ignored, and a later request of the same id is served. */
  stdio_send(s, CANCEL(2));
  stdio_send(s, PING(2));
  expect_answer(s, 2);
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked + 1);

  /* On 2025-11-25 each request in a batch is refused, and none is served. */
  s = stdio_start(w);
  stdio_send(s, INITIALIZE);
  expect_answer(s, 1);
  stdio_send(s, "[" ASK_WRITE(2) "," PING(3) "]");
  refused = expect_batch_answer(s, (json_int_t[]){2, 3}, 2);
  assert_int_equal(error_code(json_array_get(refused, 0), NULL), TG_RPC_INVALID_REQUEST);
  json_decref(refused);
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked + 1);
}

/* A call of a batch waiting for the client's answer hears of its cancellation: it withdraws
 * its question, writes nothing, and the batch, left with no reply, gets no answer. */
static void test_stdio_batched_call_cancelled_while_asking(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  stdio_run *s =
      start_asking_call_with(w, NULL, INITIALIZE_AT("2025-03-26"), "[" ASK_WRITE(3) "]", NULL);
  stdio_send(s, CANCEL(3));
  expect_withdrawn(s);
  stdio_send(s, PING(4));
  expect_answer(s, 4); /* the next line: 3 got none */
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked);
}

/* A request of a batch is cancellable while it waits its turn, queued behind a call: it never
 * runs and gets no answer, while the rest of its batch is served. */
static void test_stdio_batched_request_cancelled_while_it_waits(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  json_int_t ask = 0;
  stdio_run *s = start_asking_call_with(w, NULL, INITIALIZE_AT("2025-03-26"), ASK_WRITE(3), &ask);
  stdio_send(s, "[" ASK_WRITE(5) "," PING(6) "]");
  stdio_send(s, CANCEL(5));
  send_sampling_answer(s, ask, NULL);
  expect_answer(s, 3);
  json_decref(expect_batch_answer(s, (json_int_t[]){6}, 1)); /* had 5 run, it would have asked */
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked + 1);
}

static void test_stdio_cancel_while_the_client_is_asked(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  stdio_run *s = start_asking_call(w);
  /* While the call waits: a request, cancelled before it is served; a ping, answered at
   * once; then the call is cancelled. */
  stdio_send(s, LIST(3));
  stdio_send(s, CANCEL(3));
  stdio_send(s, PING(4));
  expect_answer(s, 4);
  stdio_send(s, CANCEL(2));
  stdio_send(s, PING(5));
  /* Neither 2 nor 3 is answered: the next lines answer 5 and withdraw the question the call
   * no longer waits for, in either order. */
  bool answered = false, withdrawn = false;
  for (int i = 0; i < 2; i++) {
    json_t *msg = stdio_next(s);
    if (json_integer_value(json_object_get(msg, "id")) == 5) answered = true;
    else if (withdraws(msg, "The call no longer waits for it")) withdrawn = true;
    else fail_msg("unexpected %s", json_dumps(msg, JSON_COMPACT));
    json_decref(msg);
  }
  assert_true(answered && withdrawn);
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked);
}

/* A ping of id 7 padded with spaces to size bytes, sent with CRLF framing. */
static void send_padded_ping(stdio_run *s, size_t size) {
  static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}";
  char *line = malloc(size + 2);
  assert_non_null(line);
  memset(line, ' ', size);
  memcpy(line, ping, sizeof ping - 1);
  memcpy(line + size, "\r\n", 2);
  assert_int_equal(write(s->to_server, line, size + 2), (ssize_t)(size + 2));
  free(line);
}

/* A message at the size limit is served whether its line ends in LF or CRLF; a byte more is
 * refused, and the connection goes on. */
static void test_stdio_message_at_the_limit_with_crlf(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  send_padded_ping(s, TG_RPC_MAX_BODY);
  expect_answer(s, 7);
  send_padded_ping(s, TG_RPC_MAX_BODY + 1);
  json_t *refused = stdio_next(s);
  assert_string_equal(json_string_value(json_object_get(json_object_get(refused, "error"), "message")),
                      "Message too large");
  assert_int_equal(json_integer_value(json_object_get(refused, "id")), 7); /* read from its start */
  json_decref(refused);
  /* Its id is found wherever it comes: last, as the TypeScript SDK writes it. */
  size_t size = TG_RPC_MAX_BODY + 4096;
  char *line = malloc(size + 1);
  assert_non_null(line);
  memset(line, ' ', size);
  static const char head[] = "{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"params\":{\"pad\":\"";
  static const char tail[] = "\"},\"id\":9}\n";
  memcpy(line, head, sizeof head - 1);
  memcpy(line + size + 1 - (sizeof tail - 1), tail, sizeof tail - 1);
  assert_int_equal(write(s->to_server, line, size + 1), (ssize_t)(size + 1));
  free(line);
  refused = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(refused, "id")), 9);
  json_decref(refused);
  stdio_send(s, PING(8));
  expect_answer(s, 8);
  stdio_stop(s);
}

/* A new API token of w->agent (malloc'd), and its id in id. */
static char *agent_token(world *w, char id[TG_UUID_LEN + 1]) {
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.token.create",
                                "{\"agentSlug\":\"bot\"}", NULL, &res),
                   0);
  char *token = strdup(json_string_value(json_object_get(res.value, "token")));
  snprintf(id, TG_UUID_LEN + 1, "%s", json_string_value(json_object_get(res.value, "tokenId")));
  tg_call_result_done(&res);
  return token;
}

static void revoke_token(world *w, const char *id) {
  char args[96];
  snprintf(args, sizeof args, "{\"tokenId\":\"%s\"}", id);
  tg_call_result res;
  assert_int_equal(fixture_call(w->f, w->f->owner, TG_SURFACE_API, "admin.token.revoke", args,
                                NULL, &res),
                   0);
  tg_call_result_done(&res);
}

/* Waits until the server closes its output (a hang guard, not a timing check), then for its
 * thread (stdio_join). */
static int await_stdio_end(stdio_run *s) {
  for (char byte;;) {
    struct pollfd p = {.fd = s->from_server, .events = POLLIN};
    if (poll(&p, 1, HANG_GUARD_MS) != 1) fail_msg("the server never ended");
    ssize_t n = read(s->from_server, &byte, 1);
    if (n == 0) break;
    if (n < 0) fail_msg("reading the server failed");
  }
  return stdio_join(s);
}

/* The server ends once its token is revoked: the request that finds it so gets an error, and
 * an idle connection ends as well, though no message comes. */
static void test_stdio_ends_with_its_token(void **state) {
  world *w = *state;
  char id[TG_UUID_LEN + 1];
  char *token = agent_token(w, id);
  revoke_token(w, id);
  /* Sent as it starts: served long before it would look on its own, two seconds idle. */
  stdio_run *s = stdio_start_with(w, token);
  /* Two requests in one write: read together, the second waits behind the first, and is
   * refused too as the server ends. */
  stdio_send(s, PING(2) "\n" PING(22));
  for (json_int_t ping = 2; ping <= 22; ping += 20) {
    json_t *refused = stdio_next(s);
    assert_int_equal(json_integer_value(json_object_get(refused, "id")), ping);
    json_t *error = json_object_get(refused, "error");
    assert_string_equal(json_string_value(json_object_get(error, "message")),
                        "The token this server runs with was revoked");
    assert_int_equal(json_integer_value(json_object_get(error, "code")), TG_RPC_INVALID_REQUEST);
    json_decref(refused);
  }
  assert_int_equal(await_stdio_end(s), TG_E_NOTFOUND);
  free(token);
  /* Idle: nothing more is sent, and the server ends all the same. */
  token = agent_token(w, id);
  s = stdio_start_with(w, token);
  stdio_send(s, PING(3));
  expect_answer(s, 3);
  revoke_token(w, id);
  assert_int_equal(await_stdio_end(s), TG_E_NOTFOUND);
  free(token);
}

/* The next message from s answers a call by making it a task. */
static void expect_task_started(stdio_run *s) { assert_task_started(stdio_next(s)); }

/* A task at work when the server's token is revoked ends saying so, as over HTTP. */
static void test_stdio_revoked_token_ends_its_task(void **state) {
  world *w = *state;
  char id[TG_UUID_LEN + 1];
  char *token = agent_token(w, id);
  stdio_run *s = stdio_start_with(w, token);
  stdio_send(s, SLOW_TASK("600"));
  expect_task_started(s);
  revoke_token(w, id);
  stdio_send(s, PING(2));
  json_decref(stdio_next(s)); /* refused */
  assert_int_equal(await_stdio_end(s), TG_E_NOTFOUND);
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_tasks WHERE "
                                             "json_extract(task, '$.status') = 'cancelled' AND "
                                             "json_extract(task, '$.statusMessage') = "
                                             "'The token that started the task was revoked'",
                                       NULL),
                   1);
  free(token);
}

/* A ping the reader answers while a call runs checks the token too: once it is revoked, the
 * ping is refused, and the connection ends after the call. */
static void test_stdio_ping_during_a_call_checks_the_token(void **state) {
  world *w = *state;
  char id[TG_UUID_LEN + 1];
  char *token = agent_token(w, id);
  long asked = asked_rows(w);
  stdio_run *s = start_asking_call_with(w, token, INITIALIZE, ASK_WRITE(2), NULL);
  stdio_send(s, PING(5));
  expect_answer(s, 5);
  revoke_token(w, id);
  stdio_send(s, PING(6));
  /* The ping is refused; the call is cancelled (it withdraws its question, writes nothing and
   * is answered so). In this order, unless the reader's own look at the token (every two
   * seconds) came between the revocation and the ping. */
  bool withdrawn = false, answered = false;
  while (!withdrawn || !answered) {
    json_t *msg = stdio_next(s);
    json_int_t of = json_integer_value(json_object_get(msg, "id"));
    if (of == 6) {
      assert_string_equal(
          json_string_value(json_object_get(json_object_get(msg, "error"), "message")),
          "The token this server runs with was revoked");
    } else if (of == 2) {
      assert_true(json_is_true(json_object_get(json_object_get(msg, "result"), "isError")));
      answered = true;
    } else {
      assert_true(withdraws(msg, "The call no longer waits for it"));
      withdrawn = true;
    }
    json_decref(msg);
  }
  assert_int_equal(await_stdio_end(s), TG_E_NOTFOUND);
  assert_int_equal(asked_rows(w), asked);
  free(token);
}

/* A token revoked while a call waits on its client: the reader finds it so within its tick
 * of two seconds, whether the client sends nothing more or keeps sending (notifications,
 * with chatty), cancels the call (nothing of it is written, and its client gets how it ended)
 * and the connection ends. */
static void revoked_while_asking(world *w, bool chatty) {
  char id[TG_UUID_LEN + 1];
  char *token = agent_token(w, id);
  long asked = asked_rows(w);
  stdio_run *s = start_asking_call_with(w, token, INITIALIZE, ASK_WRITE(2), NULL);
  revoke_token(w, id);
  static const char note[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}\n";
  /* Until it answers: it may end just after, and a note sent then finds its input closed. */
  for (int i = 0; chatty && write(s->to_server, note, sizeof note - 1) > 0; i++) {
    struct pollfd p = {.fd = s->from_server, .events = POLLIN};
    if (poll(&p, 1, 200) == 1) break;
    if (i == HANG_GUARD_MS / 200) fail_msg("the revoked token was never found");
  }
  expect_withdrawn(s);
  expect_cancelled_call(s, 2); /* its client gets how it ended */
  assert_int_equal(await_stdio_end(s), TG_E_NOTFOUND);
  assert_int_equal(asked_rows(w), asked);
  free(token);
}

static void test_stdio_revoked_token_cancels_the_call(void **state) {
  revoked_while_asking(*state, false);
}

static void test_stdio_revoked_token_found_amid_traffic(void **state) {
  revoked_while_asking(*state, true);
}

/* A ping written right behind a call, in the same write, is answered at once: it would
 * otherwise wait behind the call, which here waits for the client. Three times, since the
 * serving thread may or may not have taken the call yet when the ping is read. */
static void test_stdio_ping_right_behind_a_call(void **state) {
  world *w = *state;
  stdio_run *s = stdio_handshaken(w, NULL, INITIALIZE);
  static const char *const both[] = {ASK_WRITE(10) "\n" PING(11), ASK_WRITE(20) "\n" PING(21),
                                     ASK_WRITE(30) "\n" PING(31)};
  for (json_int_t round = 1; round <= 3; round++) {
    stdio_send(s, both[round - 1]);
    json_int_t ask = 0;
    bool pinged = false;
    for (int i = 0; i < 2; i++) {
      json_t *msg = stdio_next(s);
      if (json_object_get(msg, "method")) ask = json_integer_value(json_object_get(msg, "id"));
      else pinged = json_integer_value(json_object_get(msg, "id")) == 10 * round + 1;
      json_decref(msg);
    }
    assert_true(pinged);
    send_sampling_answer(s, ask, NULL);
    expect_answer(s, 10 * round);
  }
  stdio_stop(s);
}

/* A token the database cannot check is no revoked token: the message that finds it so is
 * refused, to retry, and the server goes on; once the database answers it serves again. */
static void test_stdio_token_unchecked_goes_on(void **state) {
  world *w = *state;
  char id[TG_UUID_LEN + 1];
  char *token = agent_token(w, id);
  stdio_run *s = stdio_start_with(w, token);
  stdio_send(s, PING(1));
  expect_answer(s, 1);
  assert_int_equal(tg_db_exec(w->f->db, "ALTER TABLE api_tokens RENAME TO api_tokens_away", NULL,
                              NULL),
                   0);
  stdio_send(s, PING(2));
  json_t *refused = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(refused, "id")), 2);
  json_t *error = json_object_get(refused, "error");
  assert_int_equal(json_integer_value(json_object_get(error, "code")), TG_RPC_INTERNAL_ERROR);
  assert_string_equal(json_string_value(json_object_get(error, "message")),
                      "The token could not be checked; retry");
  json_decref(refused);
  /* So is each request of a batch; one of notifications alone gets no answer, as a
   * notification does not. */
  stdio_send(s, "[" INITIALIZED "]");
  stdio_send(s, "[" PING(4) "]");
  refused = expect_batch_answer(s, (json_int_t[]){4}, 1);
  assert_int_equal(error_code(json_array_get(refused, 0), NULL), TG_RPC_INTERNAL_ERROR);
  json_decref(refused);
  assert_int_equal(tg_db_exec(w->f->db, "ALTER TABLE api_tokens_away RENAME TO api_tokens", NULL,
                              NULL),
                   0);
  stdio_send(s, PING(3));
  expect_answer(s, 3);
  stdio_stop(s);
  free(token);
}

/* Waits until a call of test_await_cancel runs (a hang guard, not a timing check). */
static void await_started_call(void) {
  pthread_mutex_lock(&await_lock);
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_MS;
  for (int64_t left; !awaiting && (left = deadline - tg_monotonic_ms()) > 0;)
    tg_timed_wait(&await_started, &await_lock, left);
  bool started = awaiting;
  pthread_mutex_unlock(&await_lock);
  assert_true(started);
}

/* A client that never answers: the call stops waiting after the server's ask timeout, fails,
 * and its row is rolled back; the connection goes on. */
static void test_stdio_call_gives_up_on_a_silent_client(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  w->srv.ask_timeout_ms = 200;
  stdio_run *s = start_asking_call(w);
  json_t *msg = stdio_next(s); /* the question withdrawn, then the call's failure */
  assert_true(withdraws(msg, "No answer came in time"));
  json_decref(msg);
  msg = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(msg, "id")), 2);
  json_t *result = json_object_get(msg, "result");
  assert_true(json_object_get(msg, "error") || json_is_true(json_object_get(result, "isError")));
  json_decref(msg);
  stdio_send(s, PING(3));
  expect_answer(s, 3);
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked);
}

/* A cancellation reaches a call that asks nothing of the client while it runs: the call stops,
 * gets no answer and writes nothing, and the requests behind it are served. */
static void test_stdio_cancel_reaches_a_running_call(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  awaiting = false;
  stdio_run *s = stdio_handshaken(w, NULL, INITIALIZE);
  stdio_send(s, AWAIT_CANCEL(2));
  stdio_send(s, PING(3));
  await_started_call();
  stdio_send(s, CANCEL(2));
  expect_answer(s, 3);
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked);
}

static void expect_list_changed(stdio_run *s) {
  json_t *msg = stdio_next(s);
  assert_string_equal(json_string_value(json_object_get(msg, "method")), "notifications/tools/list_changed");
  json_decref(msg);
}

/* A stdio connection after its handshake (initialize), with call 2 of test_await_cancel
 * running: it waits for its cancellation. */
static stdio_run *start_running_call_at(world *w, const char *initialize) {
  awaiting = false;
  stdio_run *s = stdio_start(w);
  stdio_send(s, initialize);
  expect_answer(s, 1);
  stdio_send(s, AWAIT_CANCEL(2));
  await_started_call();
  return s;
}

static stdio_run *start_running_call(world *w) { return start_running_call_at(w, INITIALIZE); }

/* A ping is answered while a call runs, not after it: a client checks with it that the
 * server lives. */
static void test_stdio_ping_answered_while_a_call_runs(void **state) {
  world *w = *state;
  stdio_run *s = start_running_call(w);
  stdio_send(s, PING(3));
  expect_answer(s, 3); /* the call still runs: it waits for its cancellation */
  stdio_send(s, CANCEL(2));
  stdio_send(s, PING(4));
  expect_answer(s, 4);
  stdio_stop(s);
}

/* A batch on a connection whose negotiated revision takes none is refused at once, not behind
 * a call that runs: in its turn, nothing of it would run either (answers to the server's
 * questions included). */
static void test_stdio_batch_refused_at_once_behind_a_running_call(void **state) {
  stdio_run *s = start_running_call(*state); /* a 2025-11-25 session */
  stdio_send(s, "[" PING(3) "," LIST(4) "]");
  json_t *refused = expect_batch_answer(s, (json_int_t[]){3, 4}, 2);
  assert_int_equal(error_code(json_array_get(refused, 1), NULL), TG_RPC_INVALID_REQUEST);
  json_decref(refused);
  stdio_send(s, CANCEL(2)); /* the call still ran: it waited for this */
  stdio_send(s, PING(5));
  expect_answer(s, 5);
  stdio_stop(s);
}

enum { FIRST = 100, QUEUED = TG_MCP_STDIO_QUEUE_MAX, SENT = QUEUED + 6 };

/* A connection (opened by initialize) whose queue is full behind a running call (call 2): of
 * SENT requests from id FIRST, those past the bound were refused at once. */
static stdio_run *full_queue_at(world *w, const char *initialize) {
  stdio_run *s = start_running_call_at(w, initialize);
  char request[96];
  for (int i = 0; i < SENT; i++) {
    snprintf(request, sizeof request,
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"prompts/list\"}", FIRST + i);
    stdio_send(s, request);
  }
  /* Refused as they come, while the call still runs. */
  for (int i = QUEUED; i < SENT; i++) {
    json_t *msg = stdio_next(s);
    assert_int_equal(json_integer_value(json_object_get(msg, "id")), FIRST + i);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(msg, "error"), "code")),
                     TG_RPC_INTERNAL_ERROR);
    json_decref(msg);
  }
  return s;
}

static stdio_run *full_queue(world *w) { return full_queue_at(w, INITIALIZE); }

/* Cancels the running call: it gets no answer; the queued requests get theirs, in order. */
static void drain_queue(stdio_run *s) {
  stdio_send(s, CANCEL(2));
  for (int i = 0; i < QUEUED; i++) expect_answer(s, FIRST + i);
}

/* Behind a full queue the client's messages are still read: requests past the bound are
 * refused at once, and a cancellation still reaches the running call. */
static void test_stdio_cancel_behind_a_full_queue(void **state) {
  world *w = *state;
  stdio_run *s = full_queue(w);
  /* The end of a handshake is queued all the same. */
  stdio_send(s, INITIALIZED);
  drain_queue(s);
  /* And the session hears of list changes, which the handshake's end turned on (the check
   * after this ping takes the baseline). */
  stdio_send(s, PING(99));
  expect_answer(s, 99);
  assert_true(tg_mcp_watch_touch("notifications/tools/list_changed", w->agent));
  expect_list_changed(s);
  stdio_stop(s);
}

/* Only a handshake's end as clients send it (small) has that room: a padded one is dropped
 * like any notification, so the session hears of no list change. */
static void test_stdio_full_queue_drops_a_padded_handshake(void **state) {
  world *w = *state;
  stdio_run *s = full_queue(w);
  char padded[1200];
  int n = snprintf(padded, sizeof padded,
                   "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\",\"params\":{"
                   "\"pad\":\"");
  memset(padded + n, 'x', 1100);
  snprintf(padded + n + 1100, sizeof padded - (size_t)n - 1100, "\"}}");
  stdio_send(s, padded);
  drain_queue(s);
  stdio_send(s, PING(99));
  expect_answer(s, 99);
  assert_true(tg_mcp_watch_touch("notifications/tools/list_changed", w->agent));
  /* The check after this ping would announce the change, before the next ping's answer. */
  stdio_send(s, PING(100));
  expect_answer(s, 100);
  stdio_send(s, PING(101));
  expect_answer(s, 101);
  stdio_stop(s);
}

/* A batch refused behind a full queue leaves none of its requests in flight: cancelled
 * afterwards, its id is free for a later request. */
static void test_stdio_batch_refused_behind_a_full_queue(void **state) {
  world *w = *state;
  stdio_run *s = full_queue_at(w, INITIALIZE_AT("2025-03-26"));
  stdio_send(s, "[" PING(5000) "]");
  json_t *refused = expect_batch_answer(s, (json_int_t[]){5000}, 1);
  assert_int_equal(error_code(json_array_get(refused, 0), NULL), TG_RPC_INTERNAL_ERROR);
  json_decref(refused);
  stdio_send(s, CANCEL(5000));
  drain_queue(s);
  stdio_send(s, PING(5000));
  expect_answer(s, 5000);
  stdio_stop(s);
}

/* The next line refuses request id, as the queue behind the running call (2) is full; then
 * the call is cancelled, for the queue to be served. */
static void expect_queue_full(stdio_run *s, json_int_t id) {
  json_t *msg = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(msg, "id")), id);
  assert_int_equal(error_code(msg, NULL), TG_RPC_INTERNAL_ERROR);
  json_decref(msg);
  stdio_send(s, CANCEL(2));
}

/* The queue is bounded in bytes too: behind a running call, four requests of 4 MB wait (16 MB
 * in all), a fifth is refused at once. */
static void test_stdio_queue_bounded_in_bytes(void **state) {
  world *w = *state;
  enum { BIG = 4, STRING = 1000000 };
  stdio_run *s = start_running_call(w);
  /* A request whose params hold four strings of 1 MB (each within the string limit). */
  size_t cap = 4 * (STRING + 16) + 128;
  char *big = malloc(cap);
  for (int i = 0; i <= BIG; i++) {
    int n = snprintf(big, cap,
                     "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"prompts/list\",\"params\":{",
                     10 + i);
    for (int k = 0; k < 4; k++) {
      n += snprintf(big + n, cap - (size_t)n, "%s\"%c\":\"", k ? "," : "", 'a' + k);
      memset(big + n, 'x', STRING);
      n += STRING;
      big[n++] = '"';
    }
    snprintf(big + n, cap - (size_t)n, "}}");
    stdio_send(s, big);
  }
  free(big);
  expect_queue_full(s, 10 + BIG);
  for (int i = 0; i < BIG; i++) expect_answer(s, 10 + i);
  stdio_stop(s);
}

static void test_stdio_announces_a_revoked_grant(void **state) {
  world *w = *state;
  stdio_run *s = stdio_handshaken(w, NULL, INITIALIZE);
  stdio_send(s, PING(2));
  expect_answer(s, 2);
  /* Seen by the check after that request or by an idle one: either way, once it is
   * announced no check is running and the connection waits for input. */
  assert_true(tg_mcp_watch_touch("notifications/tools/list_changed", w->agent));
  expect_list_changed(s);
  /* So a change made now by another connection can only be found by an idle check. */
  fixture_revoke_elsewhere(w->f, "bot", "tasks.assign");
  expect_list_changed(s);
  /* Nothing changed since: requests get their answers and nothing else. */
  stdio_send(s, PING(3));
  expect_answer(s, 3);
  stdio_send(s, PING(4));
  expect_answer(s, 4);
  stdio_stop(s);
}

/* The bound in bytes counts what a queued message holds decoded, not its text: requests of
 * 40,000 empty objects (120 KB each as sent, ten MB decoded) fill the queue at the second. */
static void test_stdio_queue_bounded_by_what_it_holds(void **state) {
  world *w = *state;
  enum { OBJECTS = 40000 };
  stdio_run *s = start_running_call(w);
  char *wide = malloc(OBJECTS * 3 + 128);
  size_t n = (size_t)sprintf(wide, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"prompts/list\","
                                   "\"params\":{\"a\":[", 0);
  size_t id_at = strlen("{\"jsonrpc\":\"2.0\",\"id\":");
  for (int i = 0; i < OBJECTS; i++) n += (size_t)sprintf(wide + n, "%s{}", i ? "," : "");
  strcpy(wide + n, "]}}");
  for (char id = '5'; id <= '6'; id++) { /* the running call is 2 */
    wide[id_at] = id;
    stdio_send(s, wide);
  }
  free(wide);
  expect_queue_full(s, 6);
  expect_answer(s, 5);
  stdio_stop(s);
}

/* The next line refuses request id for reusing the id of one still served. */
static void expect_id_refused(stdio_run *s, json_int_t id) {
  json_t *refused = stdio_next(s);
  const char *why = NULL;
  assert_int_equal(json_integer_value(json_object_get(refused, "id")), id);
  assert_int_equal(error_code(refused, &why), TG_RPC_INVALID_REQUEST);
  assert_non_null(strstr(why, "still being served or cancelled"));
  json_decref(refused);
}

/* A client that reuses the id of a request still served, or just cancelled and still ending, is
 * told to give the new one an id of its own, not left waiting: the table would take the new
 * request for the old. */
static void test_stdio_id_of_a_request_being_cancelled(void **state) {
  world *w = *state;
  held = true;
  stdio_run *s = start_running_call(w);
  /* Nor may it reuse the id of one still served. */
  for (int cancelled = 0; cancelled <= 1; cancelled++) {
    stdio_send(s, cancelled ? CANCEL(2) "\n" LIST(2) : LIST(2));
    expect_id_refused(s, 2);
  }
  release_held();
  /* Once the cancelled request ended (a request served after it is answered), its id is
   * free again. */
  stdio_send(s, LIST(3));
  expect_answer(s, 3);
  stdio_send(s, LIST(2));
  expect_answer(s, 2);
  stdio_stop(s);
}

/* An open subscriptions/listen is a request still in flight: a request reusing its id is
 * refused (a cancellation naming the id would end both), and served once the listen ended. */
static void test_stdio_id_of_an_open_listen(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
#define MODERN_LIST(id)                                                                 \
  "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/list\",\"params\":{" MODERN_META \
  "}}"
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"subscriptions/listen\",\"params\":{"
                MODERN_META ",\"notifications\":{\"toolsListChanged\":true}}}");
  json_t *ack = stdio_next(s);
  assert_string_equal(json_string_value(json_object_get(ack, "method")),
                      "notifications/subscriptions/acknowledged");
  json_decref(ack);
  stdio_send(s, MODERN_LIST(5));
  expect_id_refused(s, 5);
  /* The listen still stands: a request served after its cancellation finds the id free. */
  stdio_send(s, CANCEL(5));
  stdio_send(s, MODERN_LIST(6));
  expect_answer(s, 6);
  stdio_send(s, MODERN_LIST(5));
  expect_answer(s, 5);
#undef MODERN_LIST
  stdio_stop(s);
}

/* Its input ended, the server ends the subscriptions still open with their result, as a
 * server that ends one owes its client, and then ends. */
static void test_stdio_end_of_input_answers_open_listens(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"subscriptions/listen\",\"params\":{"
                MODERN_META ",\"notifications\":{\"toolsListChanged\":true}}}");
  json_decref(stdio_next(s)); /* acknowledged */
  close(s->to_server);
  s->to_server = -1;
  json_t *end = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(end, "id")), 5);
  json_t *result = json_object_get(end, "result");
  assert_string_equal(json_string_value(json_object_get(result, "resultType")), "complete");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(result, "_meta"),
                                                      "io.modelcontextprotocol/subscriptionId")),
                   5);
  json_decref(end);
  assert_int_equal(stdio_join(s), 0);
  /* Told to stop instead (its input still open: an end of input could come first), it
   * answers nothing more: the output ends after the acknowledgement. */
  s = stdio_start(w);
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"subscriptions/listen\",\"params\":{"
                MODERN_META ",\"notifications\":{\"toolsListChanged\":true}}}");
  json_decref(stdio_next(s)); /* acknowledged */
  assert_int_equal(write(s->stop[1], "", 1), 1);
  char rest[256];
  size_t got = s->len;
  for (ssize_t n = 1; n > 0; got += n > 0 ? (size_t)n : 0) {
    struct pollfd p = {.fd = s->from_server, .events = POLLIN};
    if (poll(&p, 1, HANG_GUARD_MS) != 1) fail_msg("the server hung");
    n = read(s->from_server, rest, sizeof rest);
  }
  assert_int_equal(got, 0);
  assert_int_equal(stdio_join(s), 0);
}

/* Told to stop once its input ended, the server does not give its tasks at work their grace:
 * a task that would have completed within it is cancelled. */
static void test_stdio_told_to_stop_in_the_grace(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  stdio_send(s, SLOW_TASK("5"));
  json_decref(stdio_next(s)); /* the task */
  close(s->to_server);
  s->to_server = -1;
  assert_int_equal(write(s->stop[1], "", 1), 1);
  assert_int_equal(stdio_join(s), 0);
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_tasks WHERE "
                                             "json_extract(task, '$.status') = 'cancelled'",
                                       NULL),
                   1);
}

/* A batch holding a request whose id names one cancelled and still ending is refused whole,
 * each of its requests answered, none served. */
static void test_stdio_batch_reusing_an_id_being_cancelled(void **state) {
  world *w = *state;
  held = true;
  stdio_run *s = start_running_call_at(w, INITIALIZE_AT("2025-03-26"));
  stdio_send(s, CANCEL(2) "\n[" LIST(2) "," PING(8) "]");
  json_t *refused = expect_batch_answer(s, (json_int_t[]){2, 8}, 2);
  const char *why = NULL;
  assert_int_equal(error_code(json_array_get(refused, 1), &why), TG_RPC_INVALID_REQUEST);
  assert_non_null(strstr(why, "still being served or cancelled"));
  json_decref(refused);
  release_held();
  stdio_stop(s);
}

/* On a connection that speaks 2026-07-28, which has no ping, a ping is not answered at once
 * behind a call: it waits its turn for its error. */
static void test_stdio_ping_on_2026_waits_its_turn(void **state) {
  world *w = *state;
  awaiting = false;
  stdio_run *s = stdio_start(w);
  /* The call is the connection's first request: it chooses 2026-07-28 as it is taken. */
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
                "\"test_await_cancel\"," MODERN_META "}}");
  await_started_call();
  stdio_send(s, PING(3));
  stdio_send(s, CANCEL(2));
  json_t *refused = stdio_next(s); /* the call, cancelled, has no answer */
  assert_int_equal(json_integer_value(json_object_get(refused, "id")), 3);
  assert_int_equal(error_code(refused, NULL), TG_RPC_INVALID_PARAMS);
  json_decref(refused);
  stdio_stop(s);
}

/* The same when a server/discover came first, in the same write: served, it chooses no era,
 * and leaves the choice the call made as it was taken. */
static void test_stdio_ping_after_discover_on_2026_waits_its_turn(void **state) {
  world *w = *state;
  awaiting = false;
  stdio_run *s = stdio_start(w);
  static const char both[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" MODERN_META
      "}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
      "\"test_await_cancel\"," MODERN_META "}}\n";
  assert_int_equal(write(s->to_server, both, sizeof both - 1), (ssize_t)(sizeof both - 1));
  json_t *discovered = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(discovered, "id")), 1);
  json_decref(discovered);
  await_started_call();
  stdio_send(s, PING(3));
  stdio_send(s, CANCEL(2));
  json_t *refused = stdio_next(s);
  assert_int_equal(json_integer_value(json_object_get(refused, "id")), 3);
  assert_int_equal(error_code(refused, NULL), TG_RPC_INVALID_PARAMS);
  json_decref(refused);
  stdio_stop(s);
}

/* An error naming no request, sent while the server's question waits (its client could not
 * read the question), answers that question at once: the call fails without waiting out the
 * ask timeout, and writes nothing. */
static void test_stdio_unnamed_error_answers_the_question(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  stdio_run *s = start_asking_call(w);
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}");
  json_decref(expect_failed_call(s, 2));
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked);
}

/* An answer to the server's question that cannot be decoded (here, a key given twice) but
 * names the question fails the call at once, as an error would, instead of leaving it to
 * wait out the ask timeout; it is refused as any message that does not decode. */
static void test_stdio_unreadable_answer_fails_the_question(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  json_int_t ask_id = 0;
  stdio_run *s = start_asking_call_with(w, NULL, INITIALIZE, ASK_WRITE(2), &ask_id);
  char answer[256];
  snprintf(answer, sizeof answer,
           "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"model\":\"m\"},\"result\":{}}",
           (long long)ask_id);
  stdio_send(s, answer);
  json_t *refused = stdio_next(s);
  assert_int_equal(error_code(refused, NULL), TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(refused, "id")); /* a response's id is the server's own */
  json_decref(refused);
  json_decref(expect_failed_call(s, 2));
  stdio_stop(s);
  assert_int_equal(asked_rows(w), asked);
}

/* Tells the server to stop; it ends, its input still open, and answers nothing after (the
 * withdrawal of a question of its may go out). */
static void stop_unanswered(stdio_run *s) {
  assert_int_equal(write(s->stop[1], "", 1), 1);
  char out[4096];
  size_t n = 0;
  for (ssize_t got; n < sizeof out - 1; n += (size_t)got) {
    struct pollfd p = {.fd = s->from_server, .events = POLLIN};
    if (poll(&p, 1, HANG_GUARD_MS) != 1) fail_msg("the server never ended");
    if ((got = read(s->from_server, out + n, sizeof out - 1 - n)) <= 0) break;
  }
  out[n] = 0;
  if (strstr(out, "\"result\"") || strstr(out, "\"error\"")) fail_msg("answered after the stop: %s", out);
  assert_int_equal(stdio_join(s), 0);
}

/* Told to stop (a signal, in the process), the server cancels what it read and has not
 * answered: the call running fails before it commits, a request waiting its turn is not
 * served, and no answer goes out; then it ends, its input still open. */
static void test_stdio_told_to_stop(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  stdio_run *s = start_running_call(w);
  stdio_send(s, LIST(3));
  stdio_send(s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"no/such\"}");
  static const char partial[] = "{\"jsonrpc\":\"2.0\",\"id\":5,"; /* no line yet */
  assert_int_equal(write(s->to_server, partial, strlen(partial)), (ssize_t)strlen(partial));
  stop_unanswered(s); /* the call, the list, the unknown method */
  assert_int_equal(asked_rows(w), asked);
}

/* Nor is a batch answered, though a part of it ended before the stop: its answer would have
 * gone out with the rest. */
static void test_stdio_told_to_stop_mid_batch(void **state) {
  world *w = *state;
  long asked = asked_rows(w);
  stdio_run *s = start_asking_call_with(w, NULL, INITIALIZE_AT("2025-03-26"),
                                        "[" LIST(2) "," ASK_WRITE(3) "]", NULL);
  stop_unanswered(s);
  assert_int_equal(asked_rows(w), asked);
}

/* Told to stop while its client reads none of its output (the pipe is full, and a write
 * waits on the client): the server gives up the message it was writing and ends. */
static void test_stdio_told_to_stop_while_its_output_is_full(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  char lists[64 * 64] = "";
  for (int id = 1; id <= 64; id++)
    snprintf(lists + strlen(lists), sizeof lists - strlen(lists), "%s" LIST(%d), id > 1 ? "\n" : "", id);
  stdio_send(s, lists); /* their answers hold far more than a pipe */
  /* Until the output stops growing: the server then waits to write. */
  int queued = -1, was;
  int64_t deadline = tg_monotonic_ms() + HANG_GUARD_MS;
  do {
    was = queued;
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    assert_int_equal(ioctl(s->from_server, FIONREAD, &queued), 0);
    if (tg_monotonic_ms() > deadline) fail_msg("the output never filled");
  } while (queued <= 0 || queued != was);
  assert_int_equal(pthread_tryjoin_np(s->thread, NULL), EBUSY); /* it waits, until told */
  assert_int_equal(write(s->stop[1], "", 1), 1);
  struct timespec guard;
  clock_gettime(CLOCK_REALTIME, &guard);
  guard.tv_sec += HANG_GUARD_MS / 1000;
  if (pthread_timedjoin_np(s->thread, NULL, &guard) != 0) fail_msg("the server never ended");
  /* What went out ends before the last of the answers. */
  char *out = malloc((size_t)queued + 1);
  assert_int_equal(read(s->from_server, out, (size_t)queued), queued);
  out[queued] = 0;
  assert_null(strstr(out, "\"id\":64"));
  free(out);
  assert_int_equal(stdio_done(s), 0);
}

/* On non-blocking sockets, answers far larger than what the socket holds all go out whole,
 * in order, to a client that reads them as they come. */
static void test_stdio_on_non_blocking_sockets(void **state) {
  stdio_run *s = stdio_start_on(*state, NULL, true);
  char lists[64 * 64] = "";
  for (int id = 1; id <= 64; id++)
    snprintf(lists + strlen(lists), sizeof lists - strlen(lists), "%s" LIST(%d), id > 1 ? "\n" : "", id);
  stdio_send(s, lists);
  for (int id = 1; id <= 64; id++) expect_answer(s, id);
  stdio_stop(s);
}

/* The client closed its input while a task is at work: the task has the grace to end, and
 * completes (another connection can read how). */
static void test_stdio_end_gives_a_task_at_work_its_grace(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  stdio_send(s, SLOW_TASK("1"));
  expect_task_started(s);
  stdio_stop(s);
  assert_int_equal(fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM mcp_tasks WHERE "
                                             "json_extract(task, '$.status') = 'completed'",
                                       NULL),
                   1);
}

/* An ended task leaves memory once its time to live is over, though no other task starts
 * to make room: the connection drops it as it idles (the database tells how it ended). The
 * task may still run as the clock moves: it can go only once it ended. */
static void test_stdio_idle_drops_expired_tasks(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  stdio_send(s, SLOW_TASK("1"));
  expect_task_started(s);
  fixture_await_expired_task_dropped();
  stdio_stop(s);
}

/* The client closed its input while a task it listens to is still at work when the grace
 * ends: the task is cancelled, and the listen hears so before its result ends it. */
static void test_stdio_end_tells_a_listen_how_its_task_ended(void **state) {
  world *w = *state;
  stdio_run *s = stdio_start(w);
  stdio_send(s, SLOW_TASK("600"));
  json_t *started = stdio_next(s);
  const char *task_id = json_string_value(json_object_get(json_object_get(started, "result"), "taskId"));
  assert_non_null(task_id);
  char listen[512];
  snprintf(listen, sizeof listen,
           "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"subscriptions/listen\",\"params\":{"
           "\"notifications\":{\"taskIds\":[\"%s\"]},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
           "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{\"extensions\":{"
           "\"io.modelcontextprotocol/tasks\":{}}}}}}",
           task_id);
  json_decref(started);
  stdio_send(s, listen);
  close(s->to_server);
  s->to_server = -1;
  char last_status[32] = "";
  json_t *msg;
  while (!json_object_get((msg = stdio_next(s)), "result")) {
    json_t *params = json_object_get(msg, "params");
    if (strcmp(json_string_value(json_object_get(msg, "method")), "notifications/tasks") == 0)
      snprintf(last_status, sizeof last_status, "%s", json_string_value(json_object_get(params, "status")));
    json_decref(msg);
  }
  assert_int_equal(json_integer_value(json_object_get(msg, "id")), 8);
  json_decref(msg);
  assert_string_equal(last_status, "cancelled");
  assert_int_equal(stdio_join(s), 0);
}

static long mcp_runs(world *w) {
  return fixture_count_where(w->f, "SELECT COUNT(*) AS n FROM agent_runs WHERE trigger = 'mcp'",
                             NULL);
}

/* A stdio server's own run opens at its first tool call, so that a client that starts it to
 * look (initialize, ping, tools/list) leaves no row; one that cannot start serves its call as
 * a run of its own, and the next call tries again, then is the run's. */
static void test_stdio_opens_its_run_at_its_first_call(void **state) {
  world *w = *state;
  char own[TG_UUID_LEN + 1] = "";
  w->srv.own_run = own;
  long runs = mcp_runs(w);
  stdio_run *s = stdio_handshaken(w, NULL, INITIALIZE);
  stdio_send(s, PING(2));
  expect_answer(s, 2);
  stdio_send(s, LIST(3));
  expect_answer(s, 3);
  assert_int_equal(mcp_runs(w), runs);
  assert_int_equal(tg_db_exec(w->f->db,
                              "CREATE TRIGGER no_mcp_runs BEFORE INSERT ON agent_runs"
                              " WHEN NEW.trigger = 'mcp' BEGIN SELECT RAISE(ABORT, 'refused');"
                              " END",
                              NULL, NULL),
                   0);
  stdio_send(s, CALL_TOOL_LIST(4));
  json_t *got = stdio_next(s);
  assert_non_null(json_object_get(got, "result"));
  assert_null(json_object_get(json_object_get(got, "result"), "isError"));
  json_decref(got);
  assert_int_equal(mcp_runs(w), runs);
  assert_int_equal(tg_db_exec(w->f->db, "DROP TRIGGER no_mcp_runs", NULL, NULL), 0);
  stdio_send(s, CALL_TOOL_LIST(5));
  expect_answer(s, 5);
  stdio_send(s, CALL_TOOL_LIST(6));
  expect_answer(s, 6);
  stdio_stop(s);
  assert_int_equal(mcp_runs(w), runs + 1);
  assert_int_equal(strlen(own), TG_UUID_LEN);
  assert_int_equal(fixture_count_where(w->f,
                                       "SELECT COUNT(*) AS n FROM agent_run_logs WHERE run_id = $1",
                                       json_pack("[s]", own)),
                   2);
}

int main(void) {
  /* A server that ended closed its input: writing to it then fails (EPIPE), as a test sees,
   * rather than ending the tests. */
  signal(SIGPIPE, SIG_IGN);
#define KIT(name) cmocka_unit_test_setup_teardown(name, setup_kit, teardown)
#define FIXTURES(name) cmocka_unit_test_setup_teardown(name, setup_fixtures, teardown)
  const struct CMUnitTest tests[] = {
      KIT(test_cancelled_call_gets_no_answer_and_writes_nothing),
      KIT(test_cancelled_call_deaf_to_it_writes_nothing),
      KIT(test_an_ask_the_client_did_not_declare_is_not_sent),
      KIT(test_call_cancelled_while_queued_is_not_served),
      KIT(test_task_cancelled_as_it_detaches),
      KIT(test_task_cancelled_once_made),
      KIT(test_task_of_a_client_gone_once_made),
      KIT(test_list_changed_follows_the_database),
      KIT(test_list_changed_sent_again_until_it_goes_out),
      KIT(test_owed_change_not_sent_to_a_new_listener),
      FIXTURES(test_listen_acknowledges_filters_and_ends),
      FIXTURES(test_listen_cancelled_as_it_subscribes),
      FIXTURES(test_a_touch_reaches_its_principal_alone),
      FIXTURES(test_prompts_change_as_their_principal_acts),
      FIXTURES(test_no_list_changes_without_a_watch),
      KIT(test_batch_served_on_2025_03_26),
      KIT(test_batch_refused_past_2025_03_26),
      KIT(test_batch_answer_bounded),
      KIT(test_batch_with_a_2026_request_refused),
      KIT(test_stdio_batches),
      KIT(test_stdio_batched_call_cancelled_while_asking),
      KIT(test_stdio_batched_request_cancelled_while_it_waits),
      KIT(test_stdio_cancel_while_the_client_is_asked),
      KIT(test_stdio_message_at_the_limit_with_crlf),
      KIT(test_stdio_ends_with_its_token),
      KIT(test_stdio_told_to_stop),
      KIT(test_stdio_told_to_stop_mid_batch),
      KIT(test_stdio_told_to_stop_while_its_output_is_full),
      KIT(test_stdio_on_non_blocking_sockets),
      KIT(test_stdio_ping_on_2026_waits_its_turn),
      KIT(test_stdio_ping_after_discover_on_2026_waits_its_turn),
      FIXTURES(test_stdio_told_to_stop_in_the_grace),
      KIT(test_stdio_batch_reusing_an_id_being_cancelled),
      KIT(test_stdio_revoked_token_found_amid_traffic),
      KIT(test_stdio_unnamed_error_answers_the_question),
      KIT(test_stdio_unreadable_answer_fails_the_question),
      KIT(test_stdio_revoked_token_cancels_the_call),
      FIXTURES(test_stdio_end_gives_a_task_at_work_its_grace),
      FIXTURES(test_stdio_revoked_token_ends_its_task),
      FIXTURES(test_stdio_end_tells_a_listen_how_its_task_ended),
      FIXTURES(test_stdio_idle_drops_expired_tasks),
      KIT(test_stdio_token_unchecked_goes_on),
      KIT(test_stdio_ping_during_a_call_checks_the_token),
      KIT(test_stdio_ping_right_behind_a_call),
      KIT(test_stdio_call_gives_up_on_a_silent_client),
      KIT(test_stdio_cancel_reaches_a_running_call),
      KIT(test_stdio_ping_answered_while_a_call_runs),
      KIT(test_stdio_batch_refused_at_once_behind_a_running_call),
      KIT(test_stdio_cancel_behind_a_full_queue),
      KIT(test_stdio_batch_refused_behind_a_full_queue),
      KIT(test_stdio_full_queue_drops_a_padded_handshake),
      KIT(test_stdio_queue_bounded_in_bytes),
      KIT(test_stdio_id_of_a_request_being_cancelled),
      KIT(test_stdio_id_of_an_open_listen),
      KIT(test_stdio_end_of_input_answers_open_listens),
      KIT(test_stdio_queue_bounded_by_what_it_holds),
      KIT(test_stdio_announces_a_revoked_grant),
      KIT(test_stdio_opens_its_run_at_its_first_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
