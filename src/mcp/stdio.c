#include "mcp/stdio.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/status.h"

/* Messages read while a tool waited for the client's answer, served afterwards. */
#define QUEUE_MAX 64
#define READ_CHUNK (64u * 1024u)
/* How often an idle connection looks for list changes made elsewhere (the CLI, another
 * server): a change costs at most this long to announce. */
#define IDLE_TICK_MS 2000

typedef struct conn {
  int in;
  FILE *out;
  /* Messages go out whole: tasks tell of their changes from threads of their own. */
  pthread_mutex_t writing;
  char *chunk; /* bytes read from in, [pos, len) not consumed yet */
  size_t pos, len;
  char *line; /* the current input line, up to TG_RPC_MAX_BODY bytes */
  json_t *queue[QUEUE_MAX];
  size_t queued;
  const tg_mcp_server *srv;
  const tg_mcp_request *req;
  json_t *serving; /* id of the request being served, NULL between requests */
} conn;

/* Writes one encoded message (text, freed) as a line. */
static int write_text(conn *c, char *text) {
  if (!text) return TG_E_NOMEM;
  pthread_mutex_lock(&c->writing);
  int r = fputs(text, c->out) < 0 || fputc('\n', c->out) == EOF || fflush(c->out) != 0
              ? TG_E_IO
              : TG_OK;
  pthread_mutex_unlock(&c->writing);
  free(text);
  return r;
}

static int write_message(conn *c, json_t *msg) {
  char *text = tg_rpc_encode(msg);
  json_decref(msg);
  return write_text(c, text);
}

/* Announces the principal's list changes to the client, if it listens. A failure to compute
 * them is logged and tried again at the next check; only a dead output ends the connection. */
static int check_lists(conn *c) {
  int r = tg_mcp_watch_check(c->req->watch, c->req->env, c->req->principal_id);
  if (r == TG_E_IO || r == TG_E_NOMEM) return r;
  if (r < 0) tg_log(TG_LOG_WARN, "mcp: the tool list could not be checked for changes (%d)", r);
  return TG_OK;
}

/* Refills the chunk. Returns the bytes read, 0 at EOF (or on a read error), or a TG_E_*.
 * While nothing arrives between requests, checks the lists every IDLE_TICK_MS; not while a
 * call waits for the client, since that call's transaction holds the database connection. */
static long refill(conn *c) {
  for (;;) {
    struct pollfd p = {.fd = c->in, .events = POLLIN};
    int ready = poll(&p, 1, IDLE_TICK_MS);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      int r = c->serving ? TG_OK : check_lists(c);
      if (r < 0) return r;
      continue;
    }
    ssize_t n = read(c->in, c->chunk, READ_CHUNK);
    if (n < 0 && errno == EINTR) continue;
    c->pos = 0;
    c->len = n > 0 ? (size_t)n : 0;
    return (long)c->len;
  }
}

/* What reading one line or one message came to; failures are negative TG_E_*. */
enum { GOT_NOTHING, GOT_ONE, GOT_EOF, GOT_TOO_LONG };

/* Reads one line into c->line (*len bytes). Returns GOT_ONE, GOT_EOF, GOT_TOO_LONG (the line
 * was consumed and dropped) or the failure of an idle check. */
static int read_line(conn *c, size_t *len) {
  bool too_long = false, any = false;
  *len = 0;
  for (;;) {
    if (c->pos == c->len) {
      long n = refill(c);
      if (n < 0) return (int)n;
      if (n == 0) break;
    }
    char ch = c->chunk[c->pos++];
    any = true;
    if (ch == '\n') break;
    if (*len < TG_RPC_MAX_BODY) c->line[(*len)++] = ch;
    else too_long = true;
  }
  if (!any) return GOT_EOF;
  if (too_long) return GOT_TOO_LONG;
  /* Tolerate CRLF framing from clients on other systems. */
  if (*len && c->line[*len - 1] == '\r') (*len)--;
  return GOT_ONE;
}

static bool blank(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != ' ' && s[i] != '\t') return false;
  return true;
}

/* The next message: GOT_ONE with *msg decoded, GOT_NOTHING (a blank line, or an error
 * already answered), GOT_EOF, or a TG_E_*. */
static int next_message(conn *c, tg_rpc_msg *msg) {
  size_t len;
  int got = read_line(c, &len);
  if (got < 0 || got == GOT_EOF) return got;
  if (got == GOT_ONE && blank(c->line, len)) return GOT_NOTHING;
  json_t *err = NULL;
  if (got == GOT_TOO_LONG) {
    err = tg_rpc_error(NULL, TG_RPC_INVALID_REQUEST, "Message too large",
                       json_pack("{s:I}", "maxBytes", (json_int_t)TG_RPC_MAX_BODY));
  } else if (tg_rpc_decode(c->line, len, msg, &err) == 0) {
    return GOT_ONE;
  }
  if (!err) return TG_E_NOMEM;
  int r = write_message(c, err);
  return r < 0 ? r : GOT_NOTHING;
}

static int io_send(void *self, json_t *msg) { return write_message(self, msg); }

static int serve_one(conn *c, const tg_rpc_msg *msg) {
  tg_mcp_reply reply;
  bool request = msg->kind == TG_RPC_REQUEST; /* never nested: only notifications are */
  if (request) c->serving = msg->id;
  int r = tg_mcp_handle(c->srv, c->req, msg, &reply);
  if (request) c->serving = NULL;
  if (r < 0) {
    json_t *err = request ? tg_rpc_error(msg->id, TG_RPC_INTERNAL_ERROR, "Out of memory", NULL) : NULL;
    return err ? write_message(c, err) : r;
  }
  return reply.text ? write_text(c, reply.text) : TG_OK;
}

/* Drops the queued request with id: cancelled before it was served, it gets no answer. */
static void unqueue(conn *c, json_t *id) {
  for (size_t i = 0; i < c->queued; i++) {
    json_t *root = c->queue[i];
    if (!json_object_get(root, "method") || !json_equal(json_object_get(root, "id"), id)) continue;
    json_decref(root);
    memmove(c->queue + i, c->queue + i + 1, (--c->queued - i) * sizeof c->queue[0]);
    return;
  }
}

/* Waits for the response to request, keeping whatever else arrives for later, except a
 * cancellation: served at once, it ends the wait when it names the call that asks. */
static int io_ask(void *self, json_t *request, json_t **ret) {
  conn *c = self;
  json_t *id = json_incref(json_object_get(request, "id"));
  int r = write_message(c, request);
  while (r == 0) {
    tg_rpc_msg msg;
    int got = next_message(c, &msg);
    if (got < 0 || got == GOT_EOF) {
      r = got < 0 ? got : TG_E_IO;
      break;
    }
    if (got == GOT_NOTHING) continue;
    json_t *target = tg_mcp_cancel_target(&msg);
    if (msg.kind == TG_RPC_RESPONSE && json_equal(msg.id, id)) {
      *ret = json_incref(msg.root);
      tg_rpc_msg_done(&msg);
      break;
    }
    if (target) {
      unqueue(c, target);
      r = serve_one(c, &msg);
      if (r == 0 && tg_mcp_inflight_cancelled(c->req->inflight, c->serving)) r = TG_E_IO;
    } else if (c->queued == QUEUE_MAX) {
      /* A request dropped is still answered, so that the client does not wait for it. */
      tg_log(TG_LOG_WARN, "mcp: too many messages while waiting for the client; dropping one");
      if (msg.kind == TG_RPC_REQUEST)
        r = write_message(c, tg_rpc_error(msg.id, TG_RPC_INTERNAL_ERROR,
                                          "Too many messages while a call waits for the client",
                                          NULL));
    } else {
      c->queue[c->queued++] = json_incref(msg.root);
    }
    tg_rpc_msg_done(&msg);
  }
  json_decref(id);
  return r;
}

/* Serves a message taken from the queue: re-decoding keeps one code path for all. */
static int serve_queued(conn *c) {
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
  r = serve_one(c, &msg);
  tg_rpc_msg_done(&msg);
  return r;
}

int tg_mcp_stdio_serve(const tg_mcp_server *srv, const tg_env *env, const char *principal_id,
                       FILE *in, FILE *out) {
  /* One process, one client: every list change can reach it. */
  tg_mcp_server served = *srv;
  served.list_changes = true;
  conn c = {.in = fileno(in), .out = out, .writing = PTHREAD_MUTEX_INITIALIZER,
            .chunk = malloc(READ_CHUNK), .line = malloc(TG_RPC_MAX_BODY), .srv = &served};
  tg_mcp_session session;
  tg_mcp_session_init(&session);
  tg_mcp_io io = {.self = &c, .send = io_send, .ask = io_ask};
  tg_mcp_request req = {.env = env, .principal_id = principal_id, .session = &session,
                        .io = &io};
  c.req = &req;
  int r = c.chunk && c.line ? tg_mcp_server_prepare(&served, env) : TG_E_NOMEM;
  if (r == 0) r = tg_mcp_inflight_new(NULL, NULL, &req.inflight);
  if (r == 0) r = tg_mcp_watch_new(io_send, &c, &req.watch);
  while (r == 0) {
    if (c.queued) {
      r = serve_queued(&c);
    } else {
      tg_rpc_msg msg;
      int got = next_message(&c, &msg);
      if (got == GOT_EOF) break;
      r = got < 0 ? got : 0;
      if (got == GOT_ONE) {
        r = serve_one(&c, &msg);
        tg_rpc_msg_done(&msg);
      }
    }
    if (r == 0) r = check_lists(&c);
  }
  for (size_t i = 0; i < c.queued; i++) json_decref(c.queue[i]);
  tg_mcp_watch_free(req.watch);
  tg_mcp_inflight_free(req.inflight);
  tg_mcp_session_done(&session);
  tg_mcp_server_done(&served);
  pthread_mutex_destroy(&c.writing);
  free(c.line);
  free(c.chunk);
  return r < 0 ? r : 0;
}
