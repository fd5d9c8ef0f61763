/* Questions a call puts to its client (mcp/ask.c), as both transports use them: an answer
 * reaches the question it names, or, an error naming none, the one question waiting; a
 * question answered takes no second answer; places are bounded; a question no one waits for
 * any more (cancelled, client gone, time out) is withdrawn once sent, and only then; none goes
 * to a client gone or for a call cancelled. */
#include "support.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/ask.h"
#include "util/cleanup.h"
#include "util/status.h"

#define PLACES 2

/* A transport of the test's: what it sent, and whether its client went. */
typedef struct transport {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  tg_mcp_question at[PLACES];
  tg_mcp_questions questions;
  tg_mcp_inflight *inflight;
  json_t *sent; /* every message sent, in order */
  int send_fails; /* what send returns instead of sending, when not 0 */
  unsigned sends; /* every message given to send, sent or not */
  bool gone;
} transport;

/* One call asking on t, on a thread of its own. */
typedef struct call {
  transport *t;
  pthread_t thread;
  json_t *request;
  json_t *call_id;
  int64_t timeout_ms;
  int r;
  json_t *response;
} call;

static int send_msg(void *self, json_t *msg) {
  transport *t = self;
  pthread_mutex_lock(&t->lock);
  int r = t->send_fails;
  t->sends++;
  if (!r) json_array_append(t->sent, msg);
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
  json_decref(msg);
  return r;
}

static bool gone_locked(void *self) { return ((transport *)self)->gone; }

/* As the transports' wake: a cancellation makes the waiting look again. */
static void wake(void *arg) {
  transport *t = arg;
  pthread_mutex_lock(&t->lock);
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
}

static int setup(void **state) {
  transport *t = calloc(1, sizeof *t);
  assert_non_null(t);
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->changed, NULL);
  t->questions = (tg_mcp_questions){.lock = &t->lock, .changed = &t->changed, .at = t->at,
                                    .n = PLACES};
  assert_int_equal(tg_mcp_inflight_new(wake, t, &t->inflight), 0);
  assert_non_null(t->sent = json_array());
  *state = t;
  return 0;
}

static int teardown(void **state) {
  transport *t = *state;
  for (size_t i = 0; i < PLACES; i++) {
    assert_null(t->at[i].id); /* every question let go of its place */
    assert_null(t->at[i].response);
  }
  tg_mcp_inflight_free(t->inflight);
  json_decref(t->sent);
  pthread_cond_destroy(&t->changed);
  pthread_mutex_destroy(&t->lock);
  free(t);
  return 0;
}

/* How the call call_id asks on t, waiting timeout_ms at most: by default long enough for
 * any answer, so that a call that should have stopped waiting ends with the wrong outcome,
 * not a hang. */
static tg_mcp_asker asker_of(transport *t, json_t *call_id, int64_t timeout_ms) {
  return (tg_mcp_asker){.self = t, .send = send_msg, .gone_locked = gone_locked,
                        .inflight = t->inflight, .call_id = call_id,
                        .timeout_ms = timeout_ms ? timeout_ms : 10000};
}

static void *ask_thread(void *arg) {
  call *c = arg;
  tg_mcp_asker asker = asker_of(c->t, c->call_id, c->timeout_ms);
  c->r = tg_mcp_ask(&c->t->questions, &asker, c->request, &c->response);
  return NULL;
}

/* Starts a call that asks the request of id (and is itself the request call_id). */
static void start(call *c, transport *t, int id, int call_id, int64_t timeout_ms) {
  *c = (call){.t = t, .timeout_ms = timeout_ms, .call_id = json_integer(call_id),
              .request = json_pack("{s:s,s:i,s:s,s:{}}", "jsonrpc", "2.0", "id", id, "method",
                                   "elicitation/create", "params")};
  assert_int_equal(tg_mcp_inflight_begin(t->inflight, c->call_id), 0);
  assert_int_equal(pthread_create(&c->thread, NULL, ask_thread, c), 0);
}

/* Waits for c to end; its response is the test's to let go of. */
static void finish(call *c) {
  assert_int_equal(pthread_join(c->thread, NULL), 0);
  tg_mcp_inflight_end(c->t->inflight, c->call_id);
  json_decref(c->call_id);
}

/* Waits until t sent n messages. */
static void await_sent(transport *t, size_t n) {
  pthread_mutex_lock(&t->lock);
  while (json_array_size(t->sent) < n) pthread_cond_wait(&t->changed, &t->lock);
  pthread_mutex_unlock(&t->lock);
}

/* Hands the client's message text to t's questions, as a transport that read it does. */
static int answer(transport *t, const char *text) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  int r = tg_mcp_answer(&t->questions, &msg);
  tg_rpc_msg_done(&msg);
  return r;
}

/* The code of the error a response carries (0: none). */
static json_int_t error_code(const json_t *response) {
  return json_integer_value(json_object_get(json_object_get(response, "error"), "code"));
}

/* The reason of the withdrawal sent at index i, of the question of id. */
static const char *withdrawn(transport *t, size_t i, int id) {
  json_t *msg = json_array_get(t->sent, i);
  assert_string_equal(json_string_value(json_object_get(msg, "method")),
                      "notifications/cancelled");
  json_t *params = json_object_get(msg, "params");
  assert_int_equal(json_integer_value(json_object_get(params, "requestId")), id);
  return json_string_value(json_object_get(params, "reason"));
}

static void test_an_answer_reaches_the_question_it_names(void **state) {
  transport *t = *state;
  call a, b;
  start(&a, t, 7, 1, 0);
  start(&b, t, 8, 2, 0);
  await_sent(t, 2);
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}"), 0); /* none */
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{\"action\":\"b\"}}"), 1);
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"action\":\"a\"}}"), 1);
  finish(&a);
  finish(&b);
  assert_int_equal(a.r, 0);
  assert_int_equal(b.r, 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(a.response, "result"),
                                                        "action")),
                      "a");
  assert_string_equal(json_string_value(json_object_get(json_object_get(b.response, "result"),
                                                        "action")),
                      "b");
  assert_int_equal(json_array_size(t->sent), 2); /* the two questions, nothing withdrawn */
  json_decref(a.response);
  json_decref(b.response);
}

static void test_a_question_answered_takes_no_second_answer(void **state) {
  transport *t = *state;
  /* Placed by hand, with no call waiting to take the answer away. */
  t->at[0].id = json_integer(5);
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"n\":1}}"), 1);
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"n\":2}}"), 0);
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(t->at[0].response, "result"), "n")), 1);
  json_decref(t->at[0].id);
  json_decref(t->at[0].response);
  t->at[0].id = t->at[0].response = NULL;
}

static void test_an_error_naming_no_request_answers_the_one_question_waiting(void **state) {
  transport *t = *state;
  const char *unnamed = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
                        "\"message\":\"Parse error\"}}";
  call a, b;
  start(&a, t, 1, 1, 300);
  start(&b, t, 2, 2, 300);
  await_sent(t, 2);
  assert_int_equal(answer(t, unnamed), 0); /* two wait: it names neither */
  finish(&a);
  finish(&b);
  assert_int_equal(a.r, TG_E_IO); /* their time ran out, and each was withdrawn so */
  assert_int_equal(b.r, TG_E_IO);
  assert_int_equal(json_array_size(t->sent), 4);
  /* The two withdrawals, in the order the calls woke. */
  int first = (int)json_integer_value(
      json_object_get(json_object_get(json_array_get(t->sent, 2), "params"), "requestId"));
  assert_true(first == 1 || first == 2);
  assert_string_equal(withdrawn(t, 2, first), "No answer came in time");
  assert_string_equal(withdrawn(t, 3, 3 - first), "No answer came in time");
  call c;
  start(&c, t, 3, 3, 0);
  await_sent(t, 5);
  assert_int_equal(answer(t, unnamed), 1); /* one waits: it is this one's */
  finish(&c);
  assert_int_equal(c.r, 0);
  assert_int_equal(error_code(c.response), -32700);
  json_decref(c.response);
}

static void test_an_answer_that_could_not_be_read_fails_its_question(void **state) {
  transport *t = *state;
  call a;
  start(&a, t, 4, 1, 0);
  await_sent(t, 1);
  _cleanup_json_ json_t *id = json_integer(4);
  _cleanup_json_ json_t *refusal = tg_test_json(
      "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}");
  assert_int_equal(tg_mcp_answer_unreadable(&t->questions, id, refusal), 1);
  finish(&a);
  assert_int_equal(a.r, 0);
  assert_int_equal(error_code(a.response), -32600);
  json_t *data = json_object_get(json_object_get(a.response, "error"), "data");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(data, "refusal"), "code")),
                   -32700);
  json_decref(a.response);
}

static void test_places_are_bounded(void **state) {
  transport *t = *state;
  call a, b;
  start(&a, t, 1, 1, 0);
  start(&b, t, 2, 2, 0);
  await_sent(t, 2);
  tg_mcp_asker asker = asker_of(t, NULL, 1000);
  json_t *response = NULL;
  assert_int_equal(tg_mcp_ask(&t->questions, &asker, json_pack("{s:i}", "id", 3), &response),
                   TG_E_TOO_LARGE);
  assert_null(response);
  assert_int_equal(json_array_size(t->sent), 2); /* the third was not sent */
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"), 1);
  assert_int_equal(answer(t, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}"), 1);
  finish(&a);
  finish(&b);
  json_decref(a.response);
  json_decref(b.response);
}

static void test_a_question_no_one_waits_for_is_withdrawn(void **state) {
  transport *t = *state;
  call a;
  start(&a, t, 1, 10, 0);
  await_sent(t, 1);
  _cleanup_json_ json_t *call_id = json_integer(10);
  assert_true(tg_mcp_inflight_cancel(t->inflight, call_id));
  finish(&a);
  assert_int_equal(a.r, TG_E_IO);
  assert_string_equal(withdrawn(t, 1, 1), "The call no longer waits for it");

  call b;
  start(&b, t, 2, 11, 0);
  await_sent(t, 3);
  pthread_mutex_lock(&t->lock);
  t->gone = true;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
  finish(&b);
  assert_int_equal(b.r, TG_E_IO);
  assert_string_equal(withdrawn(t, 3, 2), "The call no longer waits for it");
  t->gone = false;

  call c;
  start(&c, t, 3, 12, 200);
  await_sent(t, 5);
  finish(&c);
  assert_int_equal(c.r, TG_E_IO);
  assert_string_equal(withdrawn(t, 5, 3), "No answer came in time");
  assert_int_equal(json_array_size(t->sent), 6);
}

static void test_a_question_not_sent_is_not_withdrawn(void **state) {
  transport *t = *state;
  t->send_fails = TG_E_IO;
  call a;
  start(&a, t, 1, 1, 0);
  finish(&a);
  assert_int_equal(a.r, TG_E_IO);
  assert_int_equal(t->sends, 1); /* the question alone: no withdrawal followed */
}

static void test_no_question_goes_to_a_client_gone_or_for_a_call_cancelled(void **state) {
  transport *t = *state;
  t->gone = true;
  call a;
  start(&a, t, 1, 1, 0);
  finish(&a);
  assert_int_equal(a.r, TG_E_IO);
  t->gone = false;
  call b;
  _cleanup_json_ json_t *call_id = json_integer(2);
  assert_int_equal(tg_mcp_inflight_begin(t->inflight, call_id), 0);
  assert_true(tg_mcp_inflight_cancel(t->inflight, call_id));
  start(&b, t, 2, 2, 0); /* begun again: it stands cancelled */
  finish(&b);
  tg_mcp_inflight_end(t->inflight, call_id);
  assert_int_equal(b.r, TG_E_IO);
  assert_int_equal(t->sends, 0); /* neither asked, nor withdrew */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_an_answer_reaches_the_question_it_names, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_question_answered_takes_no_second_answer, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_an_error_naming_no_request_answers_the_one_question_waiting, setup, teardown),
      cmocka_unit_test_setup_teardown(test_an_answer_that_could_not_be_read_fails_its_question,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_places_are_bounded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_question_no_one_waits_for_is_withdrawn, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_question_not_sent_is_not_withdrawn, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_no_question_goes_to_a_client_gone_or_for_a_call_cancelled, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
