#include "mcp/stdio.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/status.h"

/* Messages read while a tool waited for the client's answer, served afterwards. */
#define QUEUE_MAX 64

typedef struct conn {
  FILE *in, *out;
  char *line; /* the current input line, up to TG_RPC_MAX_BODY bytes */
  json_t *queue[QUEUE_MAX];
  size_t queued;
} conn;

static int write_message(conn *c, json_t *msg) {
  char *text = tg_rpc_encode(msg);
  json_decref(msg);
  if (!text) return TG_E_NOMEM;
  int r = fputs(text, c->out) < 0 || fputc('\n', c->out) == EOF || fflush(c->out) != 0
              ? TG_E_IO
              : TG_OK;
  free(text);
  return r;
}

/* Reads one line into c->line. Returns its length, -1 at EOF, or -2 for a line over the
 * limit (consumed and dropped). */
static long read_line(conn *c) {
  size_t len = 0;
  bool too_long = false;
  int ch;
  while ((ch = fgetc(c->in)) != EOF && ch != '\n') {
    if (len < TG_RPC_MAX_BODY) c->line[len++] = (char)ch;
    else too_long = true;
  }
  if (ch == EOF && len == 0 && !too_long) return -1;
  if (too_long) return -2;
  /* Tolerate CRLF framing from clients on other systems. */
  if (len && c->line[len - 1] == '\r') len--;
  return (long)len;
}

static bool blank(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != ' ' && s[i] != '\t') return false;
  return true;
}

/* The next message: a decoded one in *msg (returns 1), an error already answered (returns
 * 0), EOF (returns -1), or a negative TG_E_*. */
static int next_message(conn *c, tg_rpc_msg *msg) {
  long len = read_line(c);
  if (len == -1) return -1;
  if (len >= 0 && blank(c->line, (size_t)len)) return 0;
  json_t *err = NULL;
  int r;
  if (len == -2) {
    memset(msg, 0, sizeof *msg);
    err = tg_rpc_error(NULL, TG_RPC_INVALID_REQUEST, "Message too large",
                       json_pack("{s:I}", "maxBytes", (json_int_t)TG_RPC_MAX_BODY));
  } else if ((r = tg_rpc_decode(c->line, (size_t)len, msg, &err)) == 0) {
    return 1;
  }
  if (!err) return TG_E_NOMEM;
  r = write_message(c, err);
  return r < 0 ? r : 0;
}

static int io_send(void *self, json_t *msg) { return write_message(self, msg); }

/* Waits for the response to request, keeping whatever else arrives for later. */
static int io_ask(void *self, json_t *request, json_t **ret) {
  conn *c = self;
  json_t *id = json_incref(json_object_get(request, "id"));
  int r = write_message(c, request);
  while (r == 0) {
    tg_rpc_msg msg;
    int got = next_message(c, &msg);
    if (got < 0) {
      r = got == -1 ? TG_E_IO : got;
      break;
    }
    if (got == 0) continue;
    if (msg.kind == TG_RPC_RESPONSE && json_equal(msg.id, id)) {
      *ret = json_incref(msg.root);
      tg_rpc_msg_done(&msg);
      break;
    }
    if (c->queued == QUEUE_MAX) {
      tg_log(TG_LOG_WARN, "mcp: too many messages while waiting for the client; dropping one");
      tg_rpc_msg_done(&msg);
      continue;
    }
    c->queue[c->queued++] = json_incref(msg.root);
    tg_rpc_msg_done(&msg);
  }
  json_decref(id);
  return r;
}

static int serve_one(const tg_mcp_server *srv, const tg_mcp_request *req, conn *c,
                     const tg_rpc_msg *msg) {
  tg_mcp_reply reply;
  int r = tg_mcp_handle(srv, req, msg, &reply);
  if (r < 0) {
    json_t *err = tg_rpc_error(msg->id, TG_RPC_INTERNAL_ERROR, "Out of memory", NULL);
    return err && msg->kind == TG_RPC_REQUEST ? write_message(c, err) : r;
  }
  if (!reply.message) return 0;
  json_t *message = reply.message;
  reply.message = NULL;
  return write_message(c, message);
}

/* Serves a message taken from the queue: re-decoding keeps one code path for all. */
static int serve_queued(const tg_mcp_server *srv, const tg_mcp_request *req, conn *c) {
  json_t *root = c->queue[0];
  memmove(c->queue, c->queue + 1, --c->queued * sizeof c->queue[0]);
  char *text = tg_rpc_encode(root);
  json_decref(root);
  if (!text) return TG_E_NOMEM;
  tg_rpc_msg msg;
  json_t *err = NULL;
  int r = tg_rpc_decode(text, strlen(text), &msg, &err);
  free(text);
  if (r != 0) {
    json_decref(err);
    return r < 0 ? r : 0;
  }
  r = serve_one(srv, req, c, &msg);
  tg_rpc_msg_done(&msg);
  return r;
}

int tg_mcp_stdio_serve(const tg_mcp_server *srv, const tg_env *env, const char *principal_id,
                       FILE *in, FILE *out) {
  conn c = {.in = in, .out = out, .line = malloc(TG_RPC_MAX_BODY)};
  if (!c.line) return TG_E_NOMEM;
  tg_mcp_session session;
  tg_mcp_session_init(&session);
  tg_mcp_io io = {.self = &c, .send = io_send, .ask = io_ask};
  tg_mcp_request req = {.env = env, .principal_id = principal_id, .session = &session,
                        .io = &io};
  int r = 0;
  for (;;) {
    if (c.queued) {
      r = serve_queued(srv, &req, &c);
    } else {
      tg_rpc_msg msg;
      int got = next_message(&c, &msg);
      if (got == -1) break;
      if (got < 0) {
        r = got;
      } else if (got == 1) {
        r = serve_one(srv, &req, &c, &msg);
        tg_rpc_msg_done(&msg);
      }
    }
    if (r < 0) break;
  }
  for (size_t i = 0; i < c.queued; i++) json_decref(c.queue[i]);
  tg_mcp_session_done(&session);
  free(c.line);
  return r < 0 ? r : 0;
}
