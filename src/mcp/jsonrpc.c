#define _GNU_SOURCE
#include "mcp/jsonrpc.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/ids.h"
#include "util/status.h"

/* What decoded values are reckoned to hold (jansson's structures and malloc's overhead): an
 * object or array with its table, and anything else. */
#define CONTAINER_COST 256
#define SCALAR_COST 64

typedef struct scanned {
  const char *limit; /* NULL, or the limit the text goes past */
  size_t held;       /* bytes the text is reckoned to hold decoded */
} scanned;

static bool scalar_byte(char ch) {
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || ch == '-' || ch == '+' ||
         ch == '.' || ch == 'E';
}

/* The UTF-8 bytes \uXXXX decodes to; half a surrogate pair counts half of the pair's 4. */
static size_t utf8_bytes_of_escape(unsigned code) {
  return code < 0x80 ? 1 : code < 0x800 || (code >= 0xd800 && code <= 0xdfff) ? 2 : 3;
}

/* One pass over the raw text before jansson sees it, so that nesting, string sizes and the
 * number of values are bounded by us, not by the parser's compile-time limits or by memory.
 * Malformed text passes through; the parser reports it. The whole text is scanned, so that a
 * text past the bound on values is told so whatever other limit it also passes. */
static scanned scan_limits(const char *buf, size_t len) {
  scanned got = {.limit = NULL, .held = len};
  int depth = 0;
  bool in_string = false, escaped = false;
  int hex_left = 0; /* of a \uXXXX escape */
  unsigned code = 0;
  size_t string_len = 0, values = 0;
  for (size_t i = 0; i < len; i++) {
    char ch = buf[i];
    if (in_string) {
      /* A string's length is its bytes decoded, as UTF-8: a client that escapes what is
       * not ASCII (Python's json does) is held to the same bound as one that does not. */
      if (hex_left) {
        int digit = tg_hex_digit(ch); /* none: the parser refuses the escape */
        code = code << 4 | (unsigned)(digit < 0 ? 0 : digit);
        if (--hex_left == 0) string_len += utf8_bytes_of_escape(code);
      } else if (escaped) {
        escaped = false;
        if (ch == 'u') {
          hex_left = 4;
          code = 0;
        } else {
          string_len++;
        }
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      } else {
        string_len++;
      }
      if (string_len > TG_RPC_MAX_STRING && !got.limit) got.limit = "string length";
      continue;
    }
    if (ch == '"') {
      in_string = true;
      string_len = 0;
      values++;
      got.held += SCALAR_COST;
    } else if (ch == '{' || ch == '[') {
      if (++depth > TG_RPC_MAX_DEPTH && !got.limit) got.limit = "nesting depth";
      values++;
      got.held += CONTAINER_COST;
    } else if (ch == '}' || ch == ']') {
      depth--;
    } else if (scalar_byte(ch) && (i == 0 || !scalar_byte(buf[i - 1]))) {
      values++; /* a number or a literal begins */
      got.held += SCALAR_COST;
    }
  }
  if (values > TG_RPC_MAX_VALUES) got.limit = "values";
  return got;
}

/* The scan for a message's id (tg_rpc_id_scan): what it expects next at the top level. */
enum {
  SCAN_MEMBER,       /* a key, or a delimiter */
  SCAN_KEY,          /* in a string that may be a key */
  SCAN_AFTER_KEY,    /* a colon makes the string just read a key */
  SCAN_VALUE,        /* a value begins */
  SCAN_VALUE_STRING, /* in a string value */
  SCAN_VALUE_SCALAR, /* in a number or a literal */
};
enum { MEMBER_OTHER, MEMBER_ID, MEMBER_METHOD };

void tg_rpc_id_scan_init(tg_rpc_id_scan *s) { memset(s, 0, sizeof *s); }

/* A byte of the value of the member being read, kept when it is the first id. */
static void keep_id_byte(tg_rpc_id_scan *s, char ch) {
  if (s->member != MEMBER_ID || s->ids != 1) return;
  if (s->id_len < sizeof s->id) s->id[s->id_len++] = ch;
  else s->id_long = true;
}

static void value_begins(tg_rpc_id_scan *s) {
  if (s->member == MEMBER_ID) s->ids++;
  if (s->member == MEMBER_METHOD) s->methods = true;
}

static void value_ends(tg_rpc_id_scan *s) {
  if (s->member == MEMBER_ID && s->ids == 1) s->id_whole = !s->id_long;
  s->stage = SCAN_MEMBER;
}

static int member_named(const tg_rpc_id_scan *s) {
  if (s->key_len == 2 && memcmp(s->key, "id", 2) == 0) return MEMBER_ID;
  if (s->key_len == 6 && memcmp(s->key, "method", 6) == 0) return MEMBER_METHOD;
  return MEMBER_OTHER;
}

static void scan_byte(tg_rpc_id_scan *s, char ch) {
  if (s->in_string) {
    bool closes = !s->escaped && ch == '"';
    s->escaped = !s->escaped && ch == '\\';
    if (s->stage == SCAN_KEY && !closes) {
      if (s->key_len < sizeof s->key) s->key[s->key_len] = ch;
      s->key_len++;
      s->escaped_key |= ch == '\\'; /* it may read as id or method: no id is named */
    }
    if (s->stage == SCAN_VALUE_STRING) keep_id_byte(s, ch);
    if (!closes) return;
    s->in_string = false;
    if (s->stage == SCAN_KEY) s->stage = SCAN_AFTER_KEY;
    else if (s->stage == SCAN_VALUE_STRING) value_ends(s);
    return;
  }
  if (s->stage == SCAN_VALUE_SCALAR) {
    if (!strchr(",}] \t\r\n", ch)) {
      keep_id_byte(s, ch);
      return;
    }
    value_ends(s);
  }
  if (isspace((unsigned char)ch)) return;
  if (s->stage == SCAN_AFTER_KEY) {
    s->stage = SCAN_MEMBER;
    if (ch == ':') {
      s->member = member_named(s);
      s->stage = SCAN_VALUE;
      return;
    }
  }
  if (s->stage == SCAN_VALUE) {
    value_begins(s);
    if (ch != '"' && ch != '{' && ch != '[') {
      s->stage = SCAN_VALUE_SCALAR;
      keep_id_byte(s, ch);
      return;
    }
    s->stage = ch == '"' ? SCAN_VALUE_STRING : SCAN_MEMBER; /* an object or array is no id */
    if (ch == '"') keep_id_byte(s, ch);
  } else if (ch == '"' && s->depth == 1) {
    s->stage = SCAN_KEY;
    s->key_len = 0;
  }
  if (ch == '"') s->in_string = true;
  else if (ch == '{' || ch == '[') s->depth++;
  else if (ch == '}' || ch == ']') s->depth--;
}

void tg_rpc_id_scan_feed(tg_rpc_id_scan *s, const char *text, size_t len) {
  for (size_t i = 0; i < len; i++) scan_byte(s, text[i]);
}

static bool valid_id(const json_t *id) { return json_is_string(id) || json_is_integer(id); }

/* An id written as a number without a fraction (1.0, 2e3) is an integer to JSON Schema, as
 * MCP's ids are, and to the reference SDK: it is read as that integer (id stolen, a new
 * reference returned; NULL without memory). Past 2^53 a double is no exact integer. */
static json_t *integral(json_t *id) {
  double v = json_real_value(id);
  if (!json_is_real(id) || v < -9007199254740992.0 || v > 9007199254740992.0 ||
      (double)(json_int_t)v != v)
    return id;
  json_decref(id);
  return json_integer((json_int_t)v);
}

/* The id of a scanned message (a new reference, or NULL) when a request's (of a message with
 * a top-level method) or else a response's, as request says: given once (which of two was
 * meant is unsaid), read whole, a string or an integer (MCP's ids). */
static json_t *id_scanned(const tg_rpc_id_scan *s, bool request) {
  if (s->ids != 1 || !s->id_whole || s->methods != request || s->escaped_key) return NULL;
  json_t *id = integral(json_loadb(s->id, s->id_len, JSON_DECODE_ANY, NULL));
  if (valid_id(id)) return id;
  json_decref(id);
  return NULL;
}

/* The id an error about a scanned message may name: a request's (an error naming another
 * would not be an MCP message). */
static json_t *scanned_id(const tg_rpc_id_scan *s) { return id_scanned(s, true); }

json_t *tg_rpc_response_id(const tg_rpc_id_scan *scan) { return id_scanned(scan, false); }

/* The same for a message's whole text. */
static json_t *id_in(const char *buf, size_t len) {
  tg_rpc_id_scan s;
  tg_rpc_id_scan_init(&s);
  tg_rpc_id_scan_feed(&s, buf, len);
  return scanned_id(&s);
}

static json_t *jsonrpc_base(void) { return json_pack("{s:s}", "jsonrpc", "2.0"); }

/* json_object_set_new steals its value even when it fails, which the builders below rely
 * on: every reference handed to them is consumed exactly once. */
json_t *tg_rpc_error_object(int code, const char *message, json_t *data) {
  json_t *err = json_pack("{s:i,s:s}", "code", code, "message", message);
  if (!err) {
    json_decref(data);
    return NULL;
  }
  if (data && json_object_set_new(err, "data", data) < 0) {
    json_decref(err);
    return NULL;
  }
  return err;
}

json_t *tg_rpc_error(json_t *id, int code, const char *message, json_t *data) {
  json_t *err = tg_rpc_error_object(code, message, data);
  json_t *msg = jsonrpc_base();
  /* Without the request's id, none: MCP's error response has an id only as a request's
   * (JSON-RPC's null is no RequestId, and clients' schemas refuse it). */
  if (!err || !msg || (id && json_object_set(msg, "id", id) < 0)) {
    json_decref(err);
    json_decref(msg);
    return NULL;
  }
  if (json_object_set_new(msg, "error", err) < 0) {
    json_decref(msg);
    return NULL;
  }
  return msg;
}

json_t *tg_rpc_result(json_t *id, json_t *result) {
  json_t *msg = jsonrpc_base();
  if (!msg || !result || json_object_set(msg, "id", id) < 0) {
    json_decref(result);
    json_decref(msg);
    return NULL;
  }
  if (json_object_set_new(msg, "result", result) < 0) {
    json_decref(msg);
    return NULL;
  }
  return msg;
}

json_t *tg_rpc_notification(const char *method, json_t *params) {
  json_t *msg = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", method);
  if (!msg) {
    json_decref(params);
    return NULL;
  }
  if (params && json_object_set_new(msg, "params", params) < 0) {
    json_decref(msg);
    return NULL;
  }
  return msg;
}

json_t *tg_rpc_request(json_int_t id, const char *method, json_t *params) {
  json_t *msg = tg_rpc_notification(method, params);
  if (msg && json_object_set_new(msg, "id", json_integer(id)) < 0) {
    json_decref(msg);
    return NULL;
  }
  return msg;
}

char *tg_rpc_encode(const json_t *message) {
  return json_dumps(message, JSON_COMPACT | JSON_ENCODE_ANY);
}

char *tg_rpc_error_text(json_t *id, int code, const char *message, json_t *data) {
  _cleanup_json_ json_t *error = tg_rpc_error(id, code, message, data);
  return error ? tg_rpc_encode(error) : NULL;
}

char *tg_rpc_encode_result_with(json_t *id, const json_t *result, const char *key,
                                const char *raw, size_t raw_len) {
  _cleanup_free_ char *id_text = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
  _cleanup_free_ char *rest = json_dumps(result, JSON_COMPACT);
  if (!id_text || !rest) return NULL;
  size_t rest_len = strlen(rest) - 1; /* without its closing brace */
  const char *comma = rest_len > 1 ? "," : "";
  /* Sized exactly and written once: a list answer is tens of KB, and a growing buffer
   * (open_memstream) zeroes and copies it at every doubling. */
  static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":", result_key[] = ",\"result\":";
  size_t id_len = strlen(id_text), key_len = strlen(key);
  size_t len = sizeof head - 1 + id_len + sizeof result_key - 1 + rest_len + strlen(comma) +
               key_len + 3 + raw_len + 2;
  char *text = malloc(len + 1);
  if (!text) return NULL;
  char *at = text;
  at = mempcpy(at, head, sizeof head - 1);
  at = mempcpy(at, id_text, id_len);
  at = mempcpy(at, result_key, sizeof result_key - 1);
  at = mempcpy(at, rest, rest_len);
  at = stpcpy(at, comma);
  *at++ = '"';
  at = mempcpy(at, key, key_len);
  at = stpcpy(at, "\":");
  at = mempcpy(at, raw, raw_len);
  strcpy(at, "}}");
  return text;
}

static int fail(json_t *id, int code, const char *message, json_t *data, json_t **ret_error) {
  *ret_error = tg_rpc_error(id, code, message, data);
  return *ret_error ? code : TG_E_NOMEM;
}

/* The id an error about message (an object) may name, a new reference (NULL: none): a
 * request's, if it is an id as classify reads it (see integral, scanned_id). A response's id
 * is one of ours, and the peer's request of that number could take the error for its
 * answer. */
static json_t *echo_id_of(const json_t *message) {
  json_t *id = json_object_get(message, "id");
  if (!id || !json_object_get(message, "method")) return NULL;
  id = integral(json_incref(id));
  if (valid_id(id)) return id;
  json_decref(id);
  return NULL;
}

/* The error (code, why, and data: stolen, may be NULL) refusing each request in batch, in an
 * array as JSON-RPC answers a batch, so that no client waits for one; a batch holding none
 * gets one error naming no request. NULL when out of memory. */
static json_t *refusals(const json_t *batch, int code, const char *why, json_t *data) {
  json_t *answers = json_array();
  size_t i;
  json_t *m;
  json_array_foreach(batch, i, m) {
    _cleanup_json_ json_t *id = echo_id_of(m);
    if (answers && id &&
        json_array_append_new(answers, tg_rpc_error(id, code, why, json_incref(data))) < 0) {
      json_decref(answers);
      answers = NULL;
    }
  }
  if (answers && json_array_size(answers) == 0) {
    json_decref(answers);
    return tg_rpc_error(NULL, code, why, data);
  }
  json_decref(data);
  return answers;
}

/* What root (released), read from the wire, is: 0 with *msg filled, or the JSON-RPC error. */
static int classify(json_t *root, tg_rpc_msg *msg, json_t **ret_error) {
  if (!json_is_object(root)) {
    json_decref(root);
    return fail(NULL, TG_RPC_INVALID_REQUEST, "A message must be an object", NULL, ret_error);
  }
  json_t *written = json_object_get(root, "id");
  if (json_is_real(written) &&
      json_object_set_new(root, "id", integral(json_incref(written))) < 0) {
    json_decref(root);
    return TG_E_NOMEM;
  }
  /* A cancellation names its request by the id as that was read. */
  json_t *cancels = json_object_get(root, "params");
  json_t *target = json_object_get(cancels, "requestId");
  const char *verb = json_string_value(json_object_get(root, "method"));
  if (json_is_real(target) && verb && strcmp(verb, "notifications/cancelled") == 0 &&
      json_object_set_new(cancels, "requestId", integral(json_incref(target))) < 0) {
    json_decref(root);
    return TG_E_NOMEM;
  }
  json_t *id = json_object_get(root, "id");
  _cleanup_json_ json_t *echo_id = echo_id_of(root);
  int code = 0;
  const char *why = NULL;
  json_t *method = json_object_get(root, "method");
  json_t *params = json_object_get(root, "params");
  json_t *result = json_object_get(root, "result");
  json_t *error = json_object_get(root, "error");
  if (!json_is_string(json_object_get(root, "jsonrpc")) ||
      strcmp(json_string_value(json_object_get(root, "jsonrpc")), "2.0") != 0) {
    why = "jsonrpc must be \"2.0\"";
  } else if (id && !valid_id(id) && !(json_is_null(id) && !method && error)) {
    /* null (or none) only on an error response: the peer could not read the id it answers */
    why = "id must be a string or an integer";
  } else if (method) {
    if (!json_is_string(method) || json_string_length(method) == 0)
      why = "method must be a non-empty string";
    else if (params && !json_is_object(params) && !json_is_array(params))
      why = "params must be an object";
    else if (result || error) why = "a request carries no result or error";
    /* Positional params are JSON-RPC's, not MCP's: a request is refused, a notification's go
     * unread (it has no answer). */
    else if (json_is_array(params) && id) code = TG_RPC_INVALID_PARAMS;
    else if (json_is_array(params)) params = NULL;
  } else if (!id && !error) {
    why = "a message needs a method or an id";
  } else if (!!result == !!error) {
    why = "a response carries exactly one of result and error";
  } else if (error &&
             (!json_is_object(error) || !json_is_integer(json_object_get(error, "code")))) {
    why = "error must be an object with an integer code";
  }
  if (why || code) {
    code = why ? fail(echo_id, TG_RPC_INVALID_REQUEST, "Invalid Request",
                      json_pack("{s:s}", "reason", why), ret_error)
               : fail(echo_id, code, "Invalid params",
                      json_pack("{s:s}", "reason", "params must be an object, not an array"),
                      ret_error);
    json_decref(root);
    return code;
  }
  msg->root = root;
  msg->id = valid_id(id) ? id : NULL;
  msg->params = params;
  if (method) {
    msg->kind = id ? TG_RPC_REQUEST : TG_RPC_NOTIFICATION;
    msg->method = json_string_value(method);
  } else {
    msg->kind = TG_RPC_RESPONSE;
    msg->result = result;
    msg->error = error;
  }
  return 0;
}

void tg_rpc_msg_done(tg_rpc_msg *msg) {
  json_decref(msg->root);
  memset(msg, 0, sizeof *msg);
}

/* What an error refusing a message past one of its limits says of it: which, and its
 * value. */
static json_t *limit_data(const char *limit) {
  json_int_t max = strcmp(limit, "size") == 0            ? TG_RPC_MAX_BODY
                   : strcmp(limit, "string length") == 0 ? TG_RPC_MAX_STRING
                   : strcmp(limit, "nesting depth") == 0 ? TG_RPC_MAX_DEPTH
                                                         : TG_RPC_MAX_VALUES;
  return json_pack("{s:s,s:I}", "limit", limit, "max", max);
}

json_t *tg_rpc_scan_refusal(const tg_rpc_id_scan *scan, int code, const char *message,
                            json_t *data) {
  json_t *id = scan ? scanned_id(scan) : NULL;
  json_t *error = tg_rpc_error(id, code, message, data);
  json_decref(id);
  return error;
}

json_t *tg_rpc_too_large(const tg_rpc_id_scan *scan) {
  return tg_rpc_scan_refusal(scan, TG_RPC_INVALID_REQUEST, "Message too large",
                             limit_data("size"));
}

/* Whether jansson's error e says the text is no JSON (-32700): not JSON that says too much (a
 * key given twice, \u0000, a number past a double, a \u escape of half a surrogate pair,
 * which no UTF-8 string holds) nor more than jansson reads. jansson tells the lone surrogate
 * only by its text. */
static bool not_json(const json_error_t *e) {
  enum json_error_code why = json_error_code(e);
  bool lone_surrogate =
      why == json_error_invalid_syntax && strncmp(e->text, "invalid Unicode '", 17) == 0;
  return why != json_error_duplicate_key && why != json_error_null_character &&
         why != json_error_null_byte_in_key && why != json_error_numeric_overflow &&
         why != json_error_stack_overflow && why != json_error_out_of_memory && !lone_surrogate;
}

/* Whether the integer of digits (n of them, no sign) is past what jansson holds (int64). */
static bool past_int64(const char *digits, size_t n, bool negative) {
  static const char max[] = "9223372036854775807", min[] = "9223372036854775808";
  size_t width = sizeof max - 1;
  return n > width || (n == width && memcmp(digits, negative ? min : max, width) > 0);
}

/* A message's text with a fraction given to each integer past 64 bits: JSON bounds no
 * integer, and a JavaScript client writes numbers below 1e21 in digits (JSON.stringify(1e19)),
 * but jansson reads past 64 bits only reals (an id so widened is no valid id). at: where in
 * text each ".0" was put, n of them. */
typedef struct widened_text {
  char *text;
  size_t len;
  size_t *at, n;
} widened_text;

static void widened_done(widened_text *w) {
  free(w->text);
  free(w->at);
}

/* Widens buf into *w: false when no integer is past 64 bits, or without memory. */
static bool widen(const char *buf, size_t len, widened_text *w) {
  /* Each integer widened has 19 digits at least, and gains two bytes. */
  size_t most = len / 19 + 1;
  w->text = malloc(len + 2 * most);
  w->at = malloc(most * sizeof *w->at);
  if (!w->text || !w->at) return false;
  size_t o = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < len;) {
    char ch = buf[i];
    if (in_string || (ch != '-' && !isdigit((unsigned char)ch)) ||
        (i > 0 && scalar_byte(buf[i - 1]))) {
      if (in_string) {
        in_string = escaped || ch != '"';
        escaped = !escaped && ch == '\\';
      } else {
        in_string = ch == '"';
      }
      w->text[o++] = buf[i++];
      continue;
    }
    size_t start = i, digits = i + (ch == '-');
    for (i = digits; i < len && isdigit((unsigned char)buf[i]);) i++;
    memcpy(w->text + o, buf + start, i - start);
    o += i - start;
    bool integer = i == len || (buf[i] != '.' && buf[i] != 'e' && buf[i] != 'E');
    if (integer && past_int64(buf + digits, i - digits, ch == '-')) {
      w->at[w->n++] = o;
      memcpy(w->text + o, ".0", 2);
      o += 2;
    }
  }
  w->len = o;
  return w->n > 0;
}

/* Where in the text before it was widened a position in w's text is (one within a ".0": at
 * its integer's end). */
static int unwidened_position(const widened_text *w, int position) {
  int shift = 0;
  for (size_t i = 0; i < w->n && w->at[i] < (size_t)position; i++)
    shift += position - (int)w->at[i] < 2 ? position - (int)w->at[i] : 2;
  return position - shift;
}

static int parse_error(const json_error_t *e, json_t **ret_error) {
  return fail(NULL, TG_RPC_PARSE_ERROR, "Parse error",
              json_pack("{s:s,s:i}", "reason", e->text, "position", e->position), ret_error);
}

/* The -32600 of text that was read (whole, or NULL) yet is refused as no message (why, data:
 * stolen): one error for each request of a batch, else one naming the id a scan of buf finds. */
static int refuse_read(json_t *whole, const char *buf, size_t len, const char *why,
                       json_t *data, json_t **ret_error) {
  if (json_is_array(whole) && json_array_size(whole)) {
    *ret_error = refusals(whole, TG_RPC_INVALID_REQUEST, why, data);
    return *ret_error ? TG_RPC_INVALID_REQUEST : TG_E_NOMEM;
  }
  json_t *id = id_in(buf, len);
  int code = fail(id, TG_RPC_INVALID_REQUEST, why, data, ret_error);
  json_decref(id);
  return code;
}

size_t tg_rpc_reckon(const char *buf, size_t len) { return scan_limits(buf, len).held; }

/* The refusal of text past one of the scan's limits (which one: limit). It is read once
 * (jansson bounds its own depth), so that text that is no JSON is told so, and the requests of
 * a batch are named; not when reading is what the bound on values spares. A message's id is
 * found by a scan, which sees an id given twice. */
static int refuse_past_limit(const char *buf, size_t len, const char *limit, json_t **ret_error) {
  bool readable = strcmp(limit, "values") != 0;
  json_error_t jerr;
  json_t *whole = readable ? json_loadb(buf, len, JSON_DECODE_ANY, &jerr) : NULL;
  if (readable && !whole && not_json(&jerr)) return parse_error(&jerr, ret_error);
  int code = refuse_read(whole, buf, len, "Message exceeds a limit", limit_data(limit), ret_error);
  json_decref(whole);
  return code;
}

/* The refusal of text (buf, as read: wide says where it was widened) that jansson did not
 * take, as jerr says. JSON that says too much (a number past what a double holds, a key given
 * twice) is read, yet no message: -32600. Only JSON that cannot be read is -32700; past a key
 * given twice, jansson reads on once told to take it. */
static int refuse_untaken(const char *buf, size_t len, json_error_t jerr, const widened_text *wide,
                          json_t **ret_error) {
  enum json_error_code why = json_error_code(&jerr);
  if (why == json_error_duplicate_key) {
    json_error_t rest;
    json_t *again = json_loadb(buf, len, JSON_DECODE_ANY, &rest);
    if (again) {
      json_decref(again);
    } else {
      jerr = rest;
      why = json_error_code(&rest);
    }
  }
  if (wide->n) jerr.position = unwidened_position(wide, jerr.position);
  /* A string holding \u0000 is JSON, but no string here: a C string would end there. */
  bool nul = why == json_error_null_character || why == json_error_null_byte_in_key;
  if (not_json(&jerr)) return parse_error(&jerr, ret_error);
  json_t *data = json_pack("{s:s,s:i}", "reason",
                           nul ? "a string holds \\u0000, which is not taken" : jerr.text,
                           "position", jerr.position);
  /* Read, yet no message: its error names the request when a scan finds its id; a batch,
   * read taking \u0000, each of its requests. */
  size_t taking = JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES;
  json_t *batch = why == json_error_null_character ? json_loadb(buf, len, taking, NULL) : NULL;
  int code = refuse_read(batch, buf, len, "Invalid Request", data, ret_error);
  json_decref(batch);
  return code;
}

/* Takes a batch (root, stolen) into msg. An empty batch is one error, as JSON-RPC says; any
 * other is served by its transport, element by element (tg_rpc_decode_element), or refused
 * (tg_rpc_refuse_batch). */
static int take_batch(json_t *root, size_t held, tg_rpc_msg *msg, json_t **ret_error) {
  if (json_array_size(root) == 0) {
    json_decref(root);
    return fail(NULL, TG_RPC_INVALID_REQUEST, "Invalid Request",
                json_pack("{s:s}", "reason", "a batch holds no message"), ret_error);
  }
  if (json_array_size(root) > TG_RPC_MAX_BATCH) {
    *ret_error = refusals(root, TG_RPC_INVALID_REQUEST, "Too many messages in one batch",
                          json_pack("{s:i}", "maxMessages", TG_RPC_MAX_BATCH));
    json_decref(root);
    return *ret_error ? TG_RPC_INVALID_REQUEST : TG_E_NOMEM;
  }
  msg->root = root;
  msg->kind = TG_RPC_BATCH;
  msg->held = held;
  return 0;
}

int tg_rpc_decode(const char *buf, size_t len, tg_rpc_msg *msg, json_t **ret_error) {
  memset(msg, 0, sizeof *msg);
  *ret_error = NULL;
  if (len > TG_RPC_MAX_BODY) {
    tg_rpc_id_scan ids;
    tg_rpc_id_scan_init(&ids);
    tg_rpc_id_scan_feed(&ids, buf, len);
    *ret_error = tg_rpc_too_large(&ids);
    return *ret_error ? TG_RPC_INVALID_REQUEST : TG_E_NOMEM;
  }
  /* A NUL byte is JSON nowhere (within a string it must be escaped), yet jansson skips one
   * that follows a number or a literal. */
  const char *nul_byte = memchr(buf, '\0', len);
  if (nul_byte)
    return fail(NULL, TG_RPC_PARSE_ERROR, "Parse error",
                json_pack("{s:s,s:I}", "reason", "a NUL byte, which JSON has nowhere", "position",
                          (json_int_t)(nul_byte - buf)),
                ret_error);
  scanned scan = scan_limits(buf, len);
  if (scan.limit) return refuse_past_limit(buf, len, scan.limit, ret_error);
  json_error_t jerr;
  /* Any JSON value: one that is no object is valid JSON, yet no message (-32600). */
  json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  /* Past an integer of more than 64 bits, the message is read, and told of, widened. */
  __attribute__((cleanup(widened_done))) widened_text wide = {0};
  if (!root && json_error_code(&jerr) == json_error_numeric_overflow && widen(buf, len, &wide)) {
    buf = wide.text;
    len = wide.len;
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  }
  if (!root) return refuse_untaken(buf, len, jerr, &wide, ret_error);
  if (json_is_array(root)) return take_batch(root, scan.held, msg, ret_error);
  int r = classify(root, msg, ret_error);
  if (r == 0) msg->held = scan.held;
  return r;
}

int tg_rpc_decode_element(json_t *element, tg_rpc_msg *msg, json_t **ret_error) {
  memset(msg, 0, sizeof *msg);
  *ret_error = NULL;
  return classify(json_incref(element), msg, ret_error);
}

json_t *tg_rpc_refuse_batch(const tg_rpc_msg *batch, int code, const char *why, json_t *data) {
  return refusals(batch->root, code, why, data);
}

json_t *tg_rpc_refusal(const tg_rpc_msg *msg, int code, const char *why, json_t *data) {
  return msg->kind == TG_RPC_BATCH
             ? tg_rpc_refuse_batch(msg, code, why, data)
             : tg_rpc_error(msg->kind == TG_RPC_REQUEST ? msg->id : NULL, code, why, data);
}

int tg_rpc_batch_take(tg_rpc_msg *batch, int (*take)(void *arg, tg_rpc_msg *element),
                      void *arg) {
  json_t *rest = json_array();
  if (!rest) return TG_E_NOMEM;
  size_t i;
  json_t *value;
  json_array_foreach(batch->root, i, value) {
    tg_rpc_msg element;
    json_t *error = NULL;
    int r = tg_rpc_decode_element(value, &element, &error);
    json_decref(error);
    r = r == 0 ? take(arg, &element) : 0;
    tg_rpc_msg_done(&element);
    if (r < 0 || (r == 0 && json_array_append(rest, value) < 0)) {
      json_decref(rest);
      return r < 0 ? r : TG_E_NOMEM;
    }
  }
  json_decref(batch->root);
  batch->root = rest;
  return 0;
}
