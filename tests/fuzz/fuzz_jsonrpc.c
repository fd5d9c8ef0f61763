/* Fuzzes the JSON-RPC decoder and the MCP dispatch checks that need no database. Besides
 * crashes and leaks it checks the decoder's contract: success gives a message of a known
 * kind with the fields of that kind, or a batch whose elements decode alike; failure gives
 * a JSON-RPC error response with a code from the JSON-RPC range, and never both. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/jsonrpc.h"
#include "mcp/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The contract of a failed decoding (r, *err): a JSON-RPC error response, or an array of
 * them answering a batch's requests, with a code from the JSON-RPC range. */
static void check_refusal(int r, json_t *err, const tg_rpc_msg *msg) {
  if (r > 0 || (r > -32000 && r != -1) || (r <= -32000 && !err)) abort();
  if (err) {
    size_t n = json_is_array(err) ? json_array_size(err) : 1;
    if (n == 0 || msg->root) abort();
    for (size_t i = 0; i < n; i++) {
      json_t *one = json_is_array(err) ? json_array_get(err, i) : err;
      if (json_integer_value(json_object_get(json_object_get(one, "error"), "code")) != r) abort();
    }
    json_decref(err);
  }
}

/* The contract of a decoded message: one of a known kind with the fields of that kind. */
static void check_message(const tg_rpc_msg *msg) {
  if (msg->kind == TG_RPC_RESPONSE ? !msg->result == !msg->error : !msg->method) abort();
  if (msg->kind == TG_RPC_RESPONSE && !msg->id && !msg->error) abort(); /* only an error may */
  if (msg->kind != TG_RPC_RESPONSE && msg->kind != TG_RPC_REQUEST && msg->id) abort();
  if (msg->kind == TG_RPC_REQUEST && !msg->id) abort();
  /* Stateless checks on a decoded message must not crash whatever its shape. */
  (void)tg_mcp_has_claim(msg);
  char *text = tg_rpc_encode(msg->root);
  if (!text) abort();
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tg_rpc_msg msg;
  json_t *err = NULL;
  int r = tg_rpc_decode((const char *)data, size, &msg, &err);
  if (r != 0) {
    check_refusal(r, err, &msg);
    return 0;
  }
  if (err) abort();
  if (msg.kind != TG_RPC_BATCH) {
    check_message(&msg);
  } else {
    size_t n = json_array_size(msg.root);
    if (n == 0 || n > TG_RPC_MAX_BATCH) abort();
    for (size_t i = 0; i < n; i++) {
      tg_rpc_msg element;
      r = tg_rpc_decode_element(json_array_get(msg.root, i), &element, &err);
      if (r == 0) check_message(&element);
      else check_refusal(r, err, &element);
      tg_rpc_msg_done(&element);
    }
    json_t *refused = tg_rpc_refuse_batch(&msg, TG_RPC_INVALID_REQUEST, "refused", NULL);
    check_refusal(TG_RPC_INVALID_REQUEST, refused, &(tg_rpc_msg){0});
  }
  tg_rpc_msg_done(&msg);
  return 0;
}
