/* JSON-RPC decoding and encoding: every malformed shape gets its precise code, limits hold. */
#define _GNU_SOURCE
#include "support.h"

#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "mcp/jsonrpc.h"

/* Decodes text expecting failure with code; returns the error response for more checks. */
static json_t *decode_fails(const char *text, size_t len, int code) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, len, &msg, &err), code);
  assert_non_null(err);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(err, "error"), "code")), code);
  assert_string_equal(json_string_value(json_object_get(err, "jsonrpc")), "2.0");
  assert_null(msg.root);
  return err;
}

static void fails_with(const char *text, int code) {
  json_decref(decode_fails(text, strlen(text), code));
}

static void test_kinds(void **state) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  const char *req = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}";
  assert_int_equal(tg_rpc_decode(req, strlen(req), &msg, &err), 0);
  assert_int_equal(msg.kind, TG_RPC_REQUEST);
  assert_string_equal(msg.method, "tools/list");
  assert_null(msg.params);
  assert_int_equal(json_integer_value(msg.id), 7);
  tg_rpc_msg_done(&msg);

  const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\",\"params\":{}}";
  assert_int_equal(tg_rpc_decode(note, strlen(note), &msg, &err), 0);
  assert_int_equal(msg.kind, TG_RPC_NOTIFICATION);
  assert_null(msg.id);
  assert_true(json_is_object(msg.params));
  tg_rpc_msg_done(&msg);

  /* A cancellation names the request 1.0 was read as: 1. */
  const char *cancel = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                       "\"params\":{\"requestId\":1.0}}";
  assert_int_equal(tg_rpc_decode(cancel, strlen(cancel), &msg, &err), 0);
  assert_true(json_is_integer(json_object_get(msg.params, "requestId")));
  assert_int_equal(json_integer_value(json_object_get(msg.params, "requestId")), 1);
  tg_rpc_msg_done(&msg);

  const char *resp = "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}";
  assert_int_equal(tg_rpc_decode(resp, strlen(resp), &msg, &err), 0);
  assert_int_equal(msg.kind, TG_RPC_RESPONSE);
  assert_true(json_is_object(msg.result));
  tg_rpc_msg_done(&msg);

  /* An error answering a message whose id its sender could not read: a response to none. */
  static const char *const lost[] = {
      "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}",
      "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32700,\"message\":\"x\"}}"}; /* MCP's way */
  for (size_t i = 0; i < sizeof lost / sizeof lost[0]; i++) {
    assert_int_equal(tg_rpc_decode(lost[i], strlen(lost[i]), &msg, &err), 0);
    assert_int_equal(msg.kind, TG_RPC_RESPONSE);
    assert_null(msg.id);
    tg_rpc_msg_done(&msg);
  }
  /* A result names its request. */
  fails_with("{\"jsonrpc\":\"2.0\",\"result\":{}}", TG_RPC_INVALID_REQUEST);
  /* An id written as a number without a fraction is that integer, as JSON Schema reads MCP's
   * ids (string or integer). */
  static const struct {
    const char *text;
    json_int_t id;
  } integral[] = {{"{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"ping\"}", 1},
                  {"{\"jsonrpc\":\"2.0\",\"id\":-2e3,\"method\":\"ping\"}", -2000},
                  {"{\"jsonrpc\":\"2.0\",\"id\":9007199254740992.0,\"result\":{}}",
                   9007199254740992LL}};
  for (size_t i = 0; i < sizeof integral / sizeof integral[0]; i++) {
    assert_int_equal(tg_rpc_decode(integral[i].text, strlen(integral[i].text), &msg, &err), 0);
    assert_true(json_is_integer(msg.id));
    assert_int_equal(json_integer_value(msg.id), integral[i].id);
    tg_rpc_msg_done(&msg);
  }
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1e300,\"method\":\"ping\"}", TG_RPC_INVALID_REQUEST);
}

static void test_shape_errors(void **state) {
  fails_with("{bad", TG_RPC_PARSE_ERROR);
  fails_with("", TG_RPC_PARSE_ERROR);
  /* Valid JSON, but no message. */
  fails_with("1", TG_RPC_INVALID_REQUEST);
  fails_with("\"ping\"", TG_RPC_INVALID_REQUEST);
  fails_with("null", TG_RPC_INVALID_REQUEST);
  /* A batch holds at least one message (JSON-RPC answers an empty one with one error). */
  json_t *empty = decode_fails("[]", 2, TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(empty, "id"));
  json_decref(empty);
  fails_with("{\"id\":1,\"method\":\"ping\"}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", TG_RPC_INVALID_REQUEST);
  /* Positional params are JSON-RPC's, but no MCP method takes them. */
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":[1]}", TG_RPC_INVALID_PARAMS);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":\"a\"}", TG_RPC_INVALID_REQUEST);
  /* A notification with them is one still, and gets no answer: its params go unread. */
  static const char note[] = "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[1]}";
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(note, strlen(note), &msg, &err), 0);
  assert_int_equal(msg.kind, TG_RPC_NOTIFICATION);
  assert_null(msg.params);
  tg_rpc_msg_done(&msg);
  fails_with("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[1],\"result\":{}}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{\"code\":1}}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"x\"}}", TG_RPC_INVALID_REQUEST);
  /* Read, yet too much for a message: a key twice, an id past 64 bits, a number past a
   * double. */
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":99999999999999999999,\"method\":\"ping\"}",
             TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":1e400}}",
             TG_RPC_INVALID_REQUEST);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":1e}}",
             TG_RPC_PARSE_ERROR);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":", TG_RPC_PARSE_ERROR); /* cut short */
  /* A raw NUL byte anywhere, even where jansson alone would skip it (after a number or a
   * literal), is no JSON. */
#define WITH_NUL(text) {text, sizeof text - 1}
  static const struct {
    const char *text;
    size_t len;
  } with_nul[] = {WITH_NUL("{\"jsonrpc\":\"2.0\",\"id\":5\0,\"method\":\"ping\"}"),
                  WITH_NUL("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\",\"params\":{\"a\":true\0}}"),
                  WITH_NUL("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\0")};
#undef WITH_NUL
  for (size_t i = 0; i < sizeof with_nul / sizeof *with_nul; i++)
    json_decref(decode_fails(with_nul[i].text, with_nul[i].len, TG_RPC_PARSE_ERROR));
}

/* An integer past 64 bits, as JavaScript writes numbers below 1e21, is read as the real it
 * names; one within 64 bits stays an integer, digits in a string stay as they are, and an id
 * past 64 bits is still refused (a real is no id). */
static void test_integers_past_64_bits(void **state) {
  (void)state;
  static const char text[] =
      "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"x\",\"params\":{\"big\":10000000000000000000,"
      "\"low\":-9223372036854775809,\"max\":9223372036854775807,\"min\":-9223372036854775808,"
      "\"s\":\"\\\"12345678901234567890123\",\"r\":[1.5e3,99999999999999999999e1]}}";
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  assert_null(err);
  json_t *big = json_object_get(msg.params, "big"), *low = json_object_get(msg.params, "low");
  assert_true(json_is_real(big));
  assert_true(json_real_value(big) == 1e19);
  assert_true(json_is_real(low));
  assert_true(json_real_value(low) == -9223372036854775809.0);
  assert_true(json_integer_value(json_object_get(msg.params, "max")) == INT64_MAX);
  assert_true(json_integer_value(json_object_get(msg.params, "min")) == INT64_MIN);
  assert_string_equal(json_string_value(json_object_get(msg.params, "s")),
                      "\"12345678901234567890123");
  assert_true(json_real_value(json_array_get(json_object_get(msg.params, "r"), 1)) == 1e21);
  assert_int_equal(json_integer_value(msg.id), 3);
  tg_rpc_msg_done(&msg);
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":99999999999999999999,\"method\":\"ping\"}",
             TG_RPC_INVALID_REQUEST);
  /* Widened, what else is wrong is told as it would be, where it is in the text sent: a key
   * given twice, and text cut short (no JSON). */
#define TWICE(b) "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":1,\"b\":" b ",\"a\":2}}"
  static const char twice[] = TWICE("10000000000000000000"), small[] = TWICE("1");
  json_t *error = decode_fails(twice, strlen(twice), TG_RPC_INVALID_REQUEST);
  json_t *small_error = decode_fails(small, strlen(small), TG_RPC_INVALID_REQUEST);
  json_t *data = json_object_get(json_object_get(error, "error"), "data");
  json_t *small_data = json_object_get(json_object_get(small_error, "error"), "data");
  assert_string_equal(json_string_value(json_object_get(data, "reason")),
                      json_string_value(json_object_get(small_data, "reason")));
  assert_int_equal(json_integer_value(json_object_get(data, "position")),
                   json_integer_value(json_object_get(small_data, "position")) +
                       (json_int_t)(strlen(twice) - strlen(small)));
  json_decref(error);
  json_decref(small_error);
#undef TWICE
  fails_with("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":99999999999999999999}",
             TG_RPC_PARSE_ERROR);
}

static void test_error_echoes_readable_id(void **state) {
  const char *text = "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":5}";
  json_t *err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_string_equal(json_string_value(json_object_get(err, "id")), "abc");
  json_decref(err);
  /* A response's id is the server's own: an error naming it could read, to the peer, as the
   * answer to its request of that number. */
  text = "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{},\"error\":{\"code\":1}}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(err, "id"));
  json_decref(err);
  /* A fraction is no id MCP has (a string or an integer): an error naming it would not be a
   * message of MCP's either. */
  text = "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(err, "id"));
  json_decref(err);
  /* One without a fraction is its integer, read whole or scanned for. */
  text = "{\"jsonrpc\":\"2.0\",\"id\":3.0,\"method\":5}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_integer_value(json_object_get(err, "id")), 3);
  json_decref(err);
  text = "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"a\":\"\\u0000\"},\"id\":4.0}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_integer_value(json_object_get(err, "id")), 4);
  json_decref(err);
  err = decode_fails("{bad", 4, TG_RPC_PARSE_ERROR);
  assert_null(json_object_get(err, "id"));
  json_decref(err);
  /* The id is a top-level member's, as sent, of a request (a message with a method). */
  static const struct {
    const char *text;
    const char *id; /* NULL: none named */
  } scanned[] = {
      {"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"id\":5,\"a\":\"\\u0000\"},\"id\":9}", "9"},
      {"{\"jsonrpc\":\"2.0\",\"params\":{\"a\":\"\\u0000\"},\"id\" : \"x\\\"y\" ,\"method\":\"m\"}",
       "\"x\\\"y\""},
      {"{\"jsonrpc\":\"2.0\",\"method\":\"id\",\"x\":[\"id\",\"\\u0000\"],\"y\":\"id\"}", NULL},
      {"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"a\":\"\\u0000\"}}", NULL}, /* a response */
      {"{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"m\",\"p\":\"\\u0000\"}", NULL},
      /* A key written with escapes may be a second id: none is named. */
      {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"\\u0069d\":2,\"p\":\"\\u0000\"}", NULL},
  };
  for (size_t i = 0; i < sizeof scanned / sizeof scanned[0]; i++) {
    err = decode_fails(scanned[i].text, strlen(scanned[i].text), TG_RPC_INVALID_REQUEST);
    json_t *id = json_object_get(err, "id");
    if (!scanned[i].id) {
      assert_null(id);
    } else {
      char *named = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
      assert_string_equal(named, scanned[i].id);
      free(named);
    }
    json_decref(err);
  }
  /* A key given twice: the request is named, unless its id is that key (which one?). */
  text = "{\"jsonrpc\":\"2.0\",\"id\":\"a2\",\"method\":\"ping\",\"method\":\"ping\"}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_string_equal(json_string_value(json_object_get(err, "id")), "a2");
  json_decref(err);
  text = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"id\":2}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(err, "id"));
  json_decref(err);
  /* JSON this server reads but takes as no message is no parse error, and names its
   * request: a string holding \u0000 (in a value or a key), a number past a double. */
  text = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\",\"params\":{\"a\":\"b\\u0000c\"}}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_integer_value(json_object_get(err, "id")), 7);
  json_t *data = json_object_get(json_object_get(err, "error"), "data");
  assert_string_equal(json_string_value(json_object_get(data, "reason")),
                      "a string holds \\u0000, which is not taken");
  json_decref(err);
  text = "{\"jsonrpc\":\"2.0\",\"id\":\"k\",\"method\":\"x\",\"params\":{\"a\\u0000\":1}}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_string_equal(json_string_value(json_object_get(err, "id")), "k");
  json_decref(err);
  text = "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"x\",\"params\":{\"a\":1e400}}";
  err = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_integer_value(json_object_get(err, "id")), 8);
  json_decref(err);
  /* Half a surrogate pair (a string cut in the middle of an emoji, say), alone or followed
   * by no second half: JSON, but no UTF-8 string holds it. */
  static const char *const halves[] = {"\\udc00", "ok \\ud83d", "\\ud83d\\u0041"};
  for (size_t i = 0; i < sizeof halves / sizeof halves[0]; i++) {
    char half[128];
    snprintf(half, sizeof half,
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"x\":\"%s\"}}", halves[i]);
    err = decode_fails(half, strlen(half), TG_RPC_INVALID_REQUEST);
    assert_int_equal(json_integer_value(json_object_get(err, "id")), 3);
    json_decref(err);
  }
  /* A bad escape is no JSON. */
  text = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"x\":\"\\q\"}}";
  json_decref(decode_fails(text, strlen(text), TG_RPC_PARSE_ERROR));
}

static char *nested(int depth) {
  char *s = malloc((size_t)depth * 2 + 64);
  assert_non_null(s);
  size_t n = (size_t)sprintf(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":");
  for (int i = 0; i < depth; i++) s[n++] = '[';
  for (int i = 0; i < depth; i++) s[n++] = ']';
  s[n++] = '}';
  s[n++] = '}';
  s[n] = 0;
  return s;
}

/* A request whose params hold an array of n values: an empty object each, or (literals)
 * true, 7 and "s" in turn. */
static char *wide(size_t n, bool literals) {
  char *s = malloc(n * 4 + 96);
  assert_non_null(s);
  size_t at = (size_t)sprintf(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"x\",\"params\":{\"a\":[");
  static const char *const kinds[] = {"true", "7", "\"s\""};
  for (size_t i = 0; i < n; i++)
    at += (size_t)sprintf(s + at, "%s%s", i ? "," : "", literals ? kinds[i % 3] : "{}");
  strcpy(s + at, "]}}");
  return s;
}

/* Values are bounded in number, and what a message holds decoded is reckoned from them: a
 * text past the bound is not read at all. */
static void test_values_bounded(void **state) {
  /* Eleven values besides the array's items: three objects and arrays, seven strings and
   * keys, the id. */
  char *text = wide(TG_RPC_MAX_VALUES - 11, true);
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  assert_true(msg.held > strlen(text) + 64 * (size_t)(TG_RPC_MAX_VALUES - 11));
  tg_rpc_msg_done(&msg);
  free(text);
  text = wide(TG_RPC_MAX_VALUES - 10, true);
  json_t *e = decode_fails(text, strlen(text), TG_RPC_INVALID_REQUEST);
  json_t *data = json_object_get(json_object_get(e, "error"), "data");
  assert_string_equal(json_string_value(json_object_get(data, "limit")), "values");
  assert_int_equal(json_integer_value(json_object_get(data, "max")), TG_RPC_MAX_VALUES);
  /* Not read whole, it is scanned for its id all the same, so that its client learns which
   * request failed. */
  assert_int_equal(json_integer_value(json_object_get(e, "id")), 3);
  json_decref(e);
  free(text);
  /* A string id too, wherever it stands; a nested "id", or a response's, is not named. */
  static const char *const named[] = {
      "{\"params\":{\"id\":9,\"a\":[%s]},\"method\" : \"x\",\"jsonrpc\":\"2.0\", \"id\" :\"a\\\"b\"}",
      "{\"jsonrpc\":\"2.0\",\"params\":{\"id\":9,\"a\":[%s]},\"method\":\"x\"}",
      "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"a\":[%s]}}",
  };
  char *items = wide(TG_RPC_MAX_VALUES, true);
  char *list = strstr(items, "[") + 1;
  list[strlen(list) - 3] = 0; /* the items alone */
  for (size_t i = 0; i < 3; i++) {
    char *message = NULL;
    assert_true(asprintf(&message, named[i], list) > 0);
    e = decode_fails(message, strlen(message), TG_RPC_INVALID_REQUEST);
    json_t *id = json_object_get(e, "id");
    if (i == 0) assert_string_equal(json_string_value(id), "a\"b");
    else assert_null(id);
    json_decref(e);
    free(message);
  }
  /* Cut anywhere near its id, the text is scanned within its bounds. */
  static const char *const cut[] = {"\"id\"", "\"id\":", "\"id\":\"ab", "\"id\":\"a\\", "\"id\":12",
                                    "\"id\" : tr", "\"i"};
  for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
    char *message = NULL;
    int len = asprintf(&message, "{\"method\":\"x\",\"a\":[%s],%s", list, cut[i]);
    assert_true(len > 0);
    char *exact = malloc((size_t)len); /* no terminator past the text */
    memcpy(exact, message, (size_t)len);
    e = decode_fails(exact, (size_t)len, TG_RPC_INVALID_REQUEST);
    free(exact);
    json_t *id = json_object_get(e, "id");
    assert_true(!id || json_integer_value(id) == 12);
    json_decref(e);
    free(message);
  }
  free(items);
  /* Empty objects hold more than scalars. */
  text = wide(1000, false);
  assert_int_equal(tg_rpc_decode(text, strlen(text), &msg, &err), 0);
  assert_true(msg.held > strlen(text) + 256 * 1000);
  tg_rpc_msg_done(&msg);
  free(text);
}

static void test_limits(void **state) {
  /* Two levels for the message and params, the rest for the arrays. */
  char *ok = nested(TG_RPC_MAX_DEPTH - 2);
  tg_rpc_msg msg;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(ok, strlen(ok), &msg, &err), 0);
  tg_rpc_msg_done(&msg);
  free(ok);
  char *deep = nested(TG_RPC_MAX_DEPTH);
  json_t *e = decode_fails(deep, strlen(deep), TG_RPC_INVALID_REQUEST);
  json_t *data = json_object_get(json_object_get(e, "error"), "data");
  assert_string_equal(json_string_value(json_object_get(data, "limit")), "nesting depth");
  assert_int_equal(json_integer_value(json_object_get(data, "max")), TG_RPC_MAX_DEPTH);
  assert_int_equal(json_integer_value(json_object_get(e, "id")), 1); /* the client learns which */
  json_decref(e);
  free(deep);

  /* Past a limit, text that is no JSON is told so (-32700), as within it. */
  char opened[TG_RPC_MAX_DEPTH + 2];
  memset(opened, '[', sizeof opened - 1);
  opened[sizeof opened - 1] = '\0';
  json_decref(decode_fails(opened, strlen(opened), TG_RPC_PARSE_ERROR));

  /* Brackets inside strings do not count as nesting. */
  const char *quoted = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}";
  assert_int_equal(tg_rpc_decode(quoted, strlen(quoted), &msg, &err), 0);
  tg_rpc_msg_done(&msg);

  size_t big = TG_RPC_MAX_STRING + 64;
  char *s = malloc(big + 64);
  assert_non_null(s);
  size_t n = (size_t)sprintf(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"");
  memset(s + n, 'a', TG_RPC_MAX_STRING + 1);
  n += TG_RPC_MAX_STRING + 1;
  strcpy(s + n, "\"}");
  e = decode_fails(s, strlen(s), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_integer_value(json_object_get(e, "id")), 1);
  data = json_object_get(json_object_get(e, "error"), "data");
  assert_string_equal(json_string_value(json_object_get(data, "limit")), "string length");
  assert_int_equal(json_integer_value(json_object_get(data, "max")), TG_RPC_MAX_STRING);
  json_decref(e);
  /* With its id given twice, it names none (which did the client mean?). */
  char *twice = NULL;
  assert_true(asprintf(&twice, "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,%s", s + strlen("{\"jsonrpc\":\"2.0\",\"id\":1,")) > 0);
  e = decode_fails(twice, strlen(twice), TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(e, "id"));
  json_decref(e);
  free(twice);
  /* The same string in a response: the error names no id (it is one of ours). */
  char *response = malloc(big + 64);
  assert_non_null(response);
  size_t head = (size_t)sprintf(response, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"");
  memset(response + head, 'a', TG_RPC_MAX_STRING + 1);
  strcpy(response + head + TG_RPC_MAX_STRING + 1, "\"}}");
  e = decode_fails(response, strlen(response), TG_RPC_INVALID_REQUEST);
  assert_null(json_object_get(e, "id"));
  json_decref(e);
  free(response);
  /* At the limit, decoded: MAX - 1 bytes and an escaped quote (one byte decoded; the
   * string's own quotes do not count). */
  n -= 2;
  strcpy(s + n, "\\\"\"}");
  assert_int_equal(tg_rpc_decode(s, strlen(s), &msg, &err), 0);
  assert_int_equal(json_string_length(json_object_get(msg.root, "method")), TG_RPC_MAX_STRING);
  tg_rpc_msg_done(&msg);
  free(s);
  /* Escaped characters count as they decode, in UTF-8: MAX / 3 escapes of a 3-byte character
   * (6 bytes each as sent), a 'b', then one more byte makes MAX + 1; a surrogate pair is 4. */
  static const struct { const char *tail; bool taken; } escaped[] = {
      {"b", true}, {"bb", false}, {"\\u00e9", false}, {"\\ud83d\\ude00", false}, {"", true}};
  size_t thirds = TG_RPC_MAX_STRING / 3;
  for (size_t i = 0; i < sizeof escaped / sizeof *escaped; i++) {
    s = malloc(thirds * 6 + 128);
    assert_non_null(s);
    n = (size_t)sprintf(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"");
    for (size_t k = 0; k < thirds; k++, n += 6) memcpy(s + n, "\\u4e2d", 6);
    sprintf(s + n, "%s\"}", escaped[i].tail);
    if (escaped[i].taken) {
      assert_int_equal(tg_rpc_decode(s, strlen(s), &msg, &err), 0);
      tg_rpc_msg_done(&msg);
    } else {
      e = decode_fails(s, strlen(s), TG_RPC_INVALID_REQUEST);
      data = json_object_get(json_object_get(e, "error"), "data");
      assert_string_equal(json_string_value(json_object_get(data, "limit")), "string length");
      json_decref(e);
    }
    free(s);
  }
  /* A body over the limit is refused before it is read, though it is a valid message: a
   * ping followed by spaces up to one byte past the limit. */
  s = malloc(TG_RPC_MAX_BODY + 1);
  assert_non_null(s);
  memset(s, ' ', TG_RPC_MAX_BODY + 1);
  static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}";
  memcpy(s, ping, sizeof ping - 1);
  e = decode_fails(s, TG_RPC_MAX_BODY + 1, TG_RPC_INVALID_REQUEST);
  data = json_object_get(json_object_get(e, "error"), "data");
  assert_string_equal(json_string_value(json_object_get(data, "limit")), "size");
  assert_int_equal(json_integer_value(json_object_get(data, "max")), TG_RPC_MAX_BODY);
  assert_int_equal(json_integer_value(json_object_get(e, "id")), 1); /* scanned for, as above */
  json_decref(e);
  /* Its id is found wherever it comes: last, as the TypeScript SDK writes it. */
  char *padded = malloc(TG_RPC_MAX_BODY + 64);
  assert_non_null(padded);
  memset(padded, ' ', TG_RPC_MAX_BODY + 64);
  static const char opening[] = "{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"params\":{\"pad\":\"";
  static const char closing[] = "\"},\"id\":\"last\"}";
  memcpy(padded, opening, sizeof opening - 1);
  memcpy(padded + TG_RPC_MAX_BODY + 64 - (sizeof closing - 1), closing, sizeof closing - 1);
  e = decode_fails(padded, TG_RPC_MAX_BODY + 64, TG_RPC_INVALID_REQUEST);
  assert_string_equal(json_string_value(json_object_get(e, "id")), "last");
  json_decref(e);
  free(padded);
  /* At the limit, it is read. */
  assert_int_equal(tg_rpc_decode(s, TG_RPC_MAX_BODY, &msg, &e), 0);
  assert_string_equal(msg.method, "ping");
  tg_rpc_msg_done(&msg);
  free(s);
}

/* An array is a batch, read element by element as messages are; refused, each request in it
 * gets its own error; past the limits, it is refused as it is read. */
static void test_batches(void **state) {
  static const char text[] = "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
                             "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"},"
                             "{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"tools/list\"}, 7,"
                             "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}]";
  tg_rpc_msg batch, m;
  json_t *err = NULL;
  assert_int_equal(tg_rpc_decode(text, strlen(text), &batch, &err), 0);
  assert_int_equal(batch.kind, TG_RPC_BATCH);
  assert_int_equal(json_array_size(batch.root), 5);
  static const int kinds[] = {TG_RPC_REQUEST, TG_RPC_NOTIFICATION, TG_RPC_REQUEST, -1,
                              TG_RPC_RESPONSE};
  for (size_t i = 0; i < 5; i++) {
    int r = tg_rpc_decode_element(json_array_get(batch.root, i), &m, &err);
    if (kinds[i] < 0) {
      assert_int_equal(r, TG_RPC_INVALID_REQUEST);
      assert_null(json_object_get(err, "id"));
      json_decref(err);
      continue;
    }
    assert_int_equal(r, 0);
    assert_int_equal(m.kind, kinds[i]);
    tg_rpc_msg_done(&m);
  }
  for (size_t i = 0; i < 5; i++) /* elements are borrowed */
    assert_int_equal(json_array_get(batch.root, i)->refcount, 1);
  /* Refused, each request is answered by its id: its client waits for none. */
  json_t *answers = tg_rpc_refuse_batch(&batch, TG_RPC_INTERNAL_ERROR, "no", json_pack("{s:i}", "n", 1));
  assert_int_equal(json_array_size(answers), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(answers, 0), "id")), 1);
  json_t *second = json_array_get(answers, 1);
  assert_string_equal(json_string_value(json_object_get(second, "id")), "b");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(second, "error"), "code")),
                   TG_RPC_INTERNAL_ERROR);
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(json_object_get(second, "error"), "data"), "n")),
      1);
  json_decref(answers);
  tg_rpc_msg_done(&batch);
  /* One holding no request gets one error, naming none. */
  static const char notes[] = "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}]";
  assert_int_equal(tg_rpc_decode(notes, strlen(notes), &batch, &err), 0);
  answers = tg_rpc_refuse_batch(&batch, TG_RPC_INVALID_REQUEST, "no", NULL);
  assert_true(json_is_object(answers));
  assert_null(json_object_get(answers, "id"));
  json_decref(answers);
  tg_rpc_msg_done(&batch);

  /* One message more than a batch may hold: each request refused, as it is read. */
  size_t cap = (TG_RPC_MAX_BATCH + 1) * 64;
  char *many = malloc(cap);
  assert_non_null(many);
  size_t n = 0, at_limit = 0;
  for (int i = 0; i <= TG_RPC_MAX_BATCH; i++) {
    if (i == TG_RPC_MAX_BATCH) at_limit = n; /* where the last one begins */
    n += (size_t)snprintf(many + n, cap - n, "%c{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}",
                          i ? ',' : '[', i);
  }
  n += (size_t)snprintf(many + n, cap - n, "]");
  assert_int_equal(tg_rpc_decode(many, n, &batch, &answers), TG_RPC_INVALID_REQUEST);
  assert_null(batch.root);
  assert_int_equal(json_array_size(answers), TG_RPC_MAX_BATCH + 1);
  json_t *last = json_object_get(json_array_get(answers, TG_RPC_MAX_BATCH), "error");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(last, "data"), "maxMessages")),
                   TG_RPC_MAX_BATCH);
  json_decref(answers);
  /* As many as it may: read. */
  many[at_limit] = ']';
  assert_int_equal(tg_rpc_decode(many, at_limit + 1, &batch, &err), 0);
  assert_int_equal(json_array_size(batch.root), TG_RPC_MAX_BATCH);
  tg_rpc_msg_done(&batch);
  free(many);

  /* One whose strings hold \u0000: each request refused by its id. */
  static const char nul[] = "[{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"ping\"},"
                            "{\"jsonrpc\":\"2.0\",\"id\":\"n\",\"method\":\"x\",\"params\":{\"a\":\"\\u0000\"}}]";
  assert_int_equal(tg_rpc_decode(nul, strlen(nul), &batch, &answers), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_array_size(answers), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(answers, 0), "id")), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(answers, 1), "id")), "n");
  char *said = json_dumps(answers, JSON_COMPACT);
  assert_non_null(strstr(said, "a string holds \\\\u0000"));
  free(said);
  json_decref(answers);

  /* Past a limit of the text, each request readable in it is refused by its id. */
  char *deep = nested(TG_RPC_MAX_DEPTH);
  char *wrapped = NULL;
  assert_true(asprintf(&wrapped, "[%s,{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}]", deep) > 0);
  assert_int_equal(tg_rpc_decode(wrapped, strlen(wrapped), &batch, &answers), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_array_size(answers), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(answers, 1), "id")), 9);
  json_decref(answers);
  /* A key given twice in one of its messages does not keep the others from being named. */
  free(wrapped);
  assert_true(asprintf(&wrapped, "[%s,{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"p\":1,\"p\":2}]",
                       deep) > 0);
  assert_int_equal(tg_rpc_decode(wrapped, strlen(wrapped), &batch, &answers), TG_RPC_INVALID_REQUEST);
  assert_int_equal(json_array_size(answers), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(answers, 1), "id")), 9);
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_object_get(json_array_get(answers, 1), "error"), "data"),
                          "limit")),
                      "nesting depth");
  json_decref(answers);
  free(wrapped);
  free(deep);
}

static void test_builders(void **state) {
  json_t *id = json_integer(3);
  json_t *res = tg_rpc_result(id, json_pack("{s:b}", "ok", 1));
  char *text = tg_rpc_encode(res);
  assert_string_equal(text, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"ok\":true}}");
  assert_null(strchr(text, '\n'));
  free(text);
  json_decref(res);
  json_t *err = tg_rpc_error(id, TG_RPC_METHOD_NOT_FOUND, "Method not found", json_pack("{s:s}", "m", "x"));
  assert_int_equal(json_integer_value(json_object_get(json_object_get(err, "error"), "code")), -32601);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(err, "error"), "data"), "m")), "x");
  json_decref(err);
  json_t *note = tg_rpc_notification("notifications/progress", json_pack("{s:i}", "progress", 1));
  assert_null(json_object_get(note, "id"));
  json_decref(note);
  json_t *req = tg_rpc_request(9, "sampling/createMessage", NULL);
  assert_int_equal(json_integer_value(json_object_get(req, "id")), 9);
  assert_null(json_object_get(req, "params"));
  json_decref(req);
  json_decref(id);
}

/* A member encoded beforehand joins the result, an empty one or not, after its members. */
static void test_result_with_encoded_member(void **state) {
  (void)state;
  json_t *id = json_string("a\"b");
  json_t *empty = json_object();
  char *text = tg_rpc_encode_result_with(id, empty, "tools", "[1,{\"x\":2}]", 11);
  assert_string_equal(text, "{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"result\":{\"tools\":[1,{\"x\":2}]}}");
  free(text);
  json_t *some = json_pack("{s:s,s:{s:i}}", "nextCursor", "100", "_meta", "k", 1);
  text = tg_rpc_encode_result_with(id, some, "tools", "[]", 2);
  json_t *parsed = json_loads(text, 0, NULL);
  assert_non_null(parsed);
  json_t *result = json_object_get(parsed, "result");
  assert_int_equal(json_object_size(result), 3);
  assert_string_equal(json_string_value(json_object_get(result, "nextCursor")), "100");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(result, "_meta"), "k")), 1);
  assert_int_equal(json_array_size(json_object_get(result, "tools")), 0);
  assert_true(json_equal(json_object_get(parsed, "id"), id));
  json_decref(parsed);
  free(text);
  json_decref(some);
  json_decref(empty);
  json_decref(id);
}

/* A refusal answers a request by its id, each request of a batch by its own, and a
 * notification with an error naming no request. */
static void test_refusal(void **state) {
  static const struct {
    const char *text;
    bool batch;  /* an array of errors */
    long id;     /* of the (first) error; 0: none */
  } cases[] = {{"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\"}", false, 7},
               {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}", false, 0},
               {"[{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"x\"}]", true, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tg_rpc_msg msg;
    json_t *err = NULL;
    assert_int_equal(tg_rpc_decode(cases[i].text, strlen(cases[i].text), &msg, &err), 0);
    json_t *refusal =
        tg_rpc_refusal(&msg, TG_RPC_INVALID_REQUEST, "no", json_pack("{s:i}", "n", 1));
    assert_int_equal(json_is_array(refusal), cases[i].batch);
    json_t *first = cases[i].batch ? json_array_get(refusal, 0) : refusal;
    json_t *error = json_object_get(first, "error");
    assert_int_equal(json_integer_value(json_object_get(error, "code")), TG_RPC_INVALID_REQUEST);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(error, "data"), "n")), 1);
    json_t *id = json_object_get(first, "id");
    if (cases[i].id) assert_int_equal(json_integer_value(id), cases[i].id);
    else assert_null(id);
    json_decref(refusal);
    tg_rpc_msg_done(&msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kinds),
      cmocka_unit_test(test_shape_errors),
      cmocka_unit_test(test_integers_past_64_bits),
      cmocka_unit_test(test_error_echoes_readable_id),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_values_bounded),
      cmocka_unit_test(test_batches),
      cmocka_unit_test(test_builders),
      cmocka_unit_test(test_result_with_encoded_member),
      cmocka_unit_test(test_refusal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
