/* JSON-RPC 2.0 framing for MCP: decoding one message under limits a caller cannot exceed,
 * and building responses and errors. Knows nothing of MCP methods or transports. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Limits on what a peer may send in one message. */
#define TG_RPC_MAX_BODY (4u * 1024u * 1024u) /* bytes of one message */
#define TG_RPC_MAX_DEPTH 64                  /* nesting of arrays and objects */
#define TG_RPC_MAX_STRING (1024u * 1024u)    /* bytes of one string or key, decoded */
#define TG_RPC_MAX_BATCH 100                 /* messages in one batch */
/* Values (objects, arrays, strings and keys, numbers, literals) of one message: decoded, a
 * value of a few bytes as sent holds a hundred or more, so the body's bound alone would
 * let 4 MB of "[{},{},...]" take hundreds of MB. */
#define TG_RPC_MAX_VALUES 50000

/* Error codes: JSON-RPC's own, then MCP's. */
enum {
  TG_RPC_PARSE_ERROR = -32700,
  TG_RPC_INVALID_REQUEST = -32600,
  TG_RPC_METHOD_NOT_FOUND = -32601,
  TG_RPC_INVALID_PARAMS = -32602,
  TG_RPC_INTERNAL_ERROR = -32603,
  TG_RPC_RESOURCE_NOT_FOUND = -32002,     /* 2025-11-25 only */
  TG_RPC_HEADER_MISMATCH = -32020,        /* 2026-07-28 */
  TG_RPC_MISSING_CAPABILITY = -32021,     /* 2026-07-28 */
  TG_RPC_UNSUPPORTED_VERSION = -32022,    /* 2026-07-28 */
};

typedef enum tg_rpc_kind {
  TG_RPC_REQUEST,      /* method and id */
  TG_RPC_NOTIFICATION, /* method, no id */
  TG_RPC_RESPONSE,     /* id with result or error: the answer to a request we sent */
  TG_RPC_BATCH,        /* a JSON array of messages, not read yet: root is the array */
} tg_rpc_kind;

/* A decoded message. The pointers below borrow from root. */
typedef struct tg_rpc_msg {
  json_t *root;
  tg_rpc_kind kind;
  json_t *id;         /* string or integer; NULL for notifications and errors naming none */
  const char *method; /* requests and notifications */
  json_t *params;     /* object or NULL when absent */
  json_t *result;     /* responses */
  json_t *error;      /* responses */
  /* Bytes it is reckoned to hold decoded (its text's, and each value's share; an element of
   * a batch: 0): what a transport that queues messages charges for it. */
  size_t held;
} tg_rpc_msg;

/* Decodes one message of len bytes (need not be NUL-terminated). Returns 0 and fills *msg
 * (release with tg_rpc_msg_done), or a JSON-RPC error code with *ret_error a complete error
 * response (without an id unless it could be read), or TG_E_NOMEM with *ret_error NULL.
 * A batch (a JSON array, not empty) is a TG_RPC_BATCH message, which the transport serves
 * element by element or refuses; a batch refused for a limit (its text's, or more than
 * TG_RPC_MAX_BATCH messages) gets, in *ret_error, the array of its requests' refusals, as
 * tg_rpc_refuse_batch gives. */
int tg_rpc_decode(const char *buf, size_t len, tg_rpc_msg *msg, json_t **ret_error);
/* What a message's text of len bytes will hold decoded (tg_rpc_msg.held), reckoned without
 * decoding it: a transport bounding what it holds counts it first. */
size_t tg_rpc_reckon(const char *buf, size_t len);
/* A scan of a message's text, fed piece by piece, for the id an error refusing it may name:
 * for text not kept whole (a message past TG_RPC_MAX_BODY), wherever its id comes. */
typedef struct tg_rpc_id_scan {
  long long depth; /* a line over stdio has no bound on its length */
  bool in_string, escaped;
  int stage, member; /* at the top level: what comes next, and whose value is read */
  char key[8];       /* the first bytes of the string that may be a key */
  size_t key_len;
  char id[256]; /* the first id's value as sent (a longer one is not named) */
  size_t id_len;
  bool id_long, id_whole; /* it passed id's size; it was read whole */
  unsigned ids;           /* ids given */
  bool methods;           /* a method was given: a request's id, not a response's */
  bool escaped_key;       /* a key at the top level was written with escapes */
} tg_rpc_id_scan;
void tg_rpc_id_scan_init(tg_rpc_id_scan *scan);
void tg_rpc_id_scan_feed(tg_rpc_id_scan *scan, const char *text, size_t len);
/* The id of the response a message that could not be decoded meant to be, as scan found it
 * (one id, read whole, a string or an integer, and no method): a new reference, or NULL. */
json_t *tg_rpc_response_id(const tg_rpc_id_scan *scan);
/* The error refusing a message longer than TG_RPC_MAX_BODY, naming its request when scan
 * (NULL: none was read) found its id. NULL without memory. */
json_t *tg_rpc_too_large(const tg_rpc_id_scan *scan);
/* The same for a message refused unread for another reason (data: stolen, NULL). */
json_t *tg_rpc_scan_refusal(const tg_rpc_id_scan *scan, int code, const char *message,
                            json_t *data);
/* Decodes one element of a batch (borrowed) as tg_rpc_decode decodes a message. */
int tg_rpc_decode_element(json_t *element, tg_rpc_msg *msg, json_t **ret_error);
void tg_rpc_msg_done(tg_rpc_msg *msg);

/* Hands each message of batch (TG_RPC_BATCH) to take, in order; take returns 1 for one it
 * serves ahead of the others (and may move its root out), which leaves the batch, 0 for one
 * that stays, or a failure, which ends the walk and is returned (the batch still holds every
 * element, those taken and served before it included: drop it). Elements that are no
 * message stay. The batch may be left empty. */
int tg_rpc_batch_take(tg_rpc_msg *batch, int (*take)(void *arg, tg_rpc_msg *element),
                      void *arg);

/* The answer to batch (TG_RPC_BATCH) refused: an array of the error (code, why, and data:
 * stolen, may be NULL) of each request in it, so that no client waits for one, or one error
 * naming no request when it holds none. NULL when out of memory. */
json_t *tg_rpc_refuse_batch(const tg_rpc_msg *batch, int code, const char *why, json_t *data);
/* The error (code, why, data: stolen, may be NULL) refusing msg: a request's names its id, a
 * batch's is tg_rpc_refuse_batch's, and a client's notification or response gets one naming
 * no request (it has no answer of its own). NULL when out of memory. */
json_t *tg_rpc_refusal(const tg_rpc_msg *msg, int code, const char *why, json_t *data);

/* {"jsonrpc":"2.0","id":id,"result":result}; result is stolen. NULL when out of memory. */
json_t *tg_rpc_result(json_t *id, json_t *result);
/* {code,message,data?}, a JSON-RPC error object; data is stolen, may be NULL. */
json_t *tg_rpc_error_object(int code, const char *message, json_t *data);
/* {"jsonrpc":"2.0","id":id,"error":{code,message,data?}}, without "id" when id is NULL (the
 * request's could not be read); data is stolen, may be NULL. */
json_t *tg_rpc_error(json_t *id, int code, const char *message, json_t *data);
/* {"jsonrpc":"2.0","method":method,"params":params?}; params is stolen, may be NULL. */
json_t *tg_rpc_notification(const char *method, json_t *params);
/* {"jsonrpc":"2.0","id":id,"method":method,"params":params?}; params is stolen. */
json_t *tg_rpc_request(json_int_t id, const char *method, json_t *params);

/* Compact one-line text of a message (no embedded newlines), malloc'd; NULL when out of
 * memory. */
char *tg_rpc_encode(const json_t *message);
/* The text of tg_rpc_error(id, code, message, data) (data stolen), malloc'd; NULL when out of
 * memory. */
char *tg_rpc_error_text(json_t *id, int code, const char *message, json_t *data);
/* The text of tg_rpc_result(id, result) whose result (an object, not stolen) has one more
 * member, key, with raw_len bytes of JSON text encoded beforehand (compact, one line): a
 * large, constant part of a result is encoded once instead of at every answer. key needs
 * no escaping and is not a member of result. NULL when out of memory. */
char *tg_rpc_encode_result_with(json_t *id, const json_t *result, const char *key,
                                const char *raw, size_t raw_len);
