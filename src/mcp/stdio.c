#define _GNU_SOURCE
#include "mcp/stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/principal.h"
#include "core/run.h"
#include "core/token_use.h"
#include "mcp/ask.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

#define READ_CHUNK (64u * 1024u)
/* How often an idle connection looks for list changes made elsewhere (the CLI, another
 * server): a change costs at most this long to announce. */
#define IDLE_TICK_MS 2000

/* A reader thread takes the client's messages as they come, so that a cancellation reaches
 * the call it names while that call runs; the connection's thread serves the rest in order,
 * one at a time. */
typedef struct conn {
  int in, out;
  /* Messages go out whole: the reader, tasks and the serving thread all write. */
  pthread_mutex_t writing;
  bool output_cut; /* under writing: a message was cut short, told to stop (see send_line) */
  int stop[2]; /* a pipe: a byte on it stops the reader */
  char *chunk; /* bytes read from in, [pos, len) not consumed yet */
  size_t pos, len;
  char *line; /* the current input line, up to TG_RPC_MAX_BODY bytes and a CR */
  tg_rpc_id_scan past; /* of a line past them, what its refusal may name */
  const tg_mcp_server *srv;
  const tg_mcp_request *req;
  const char *token; /* the API token that named the principal, or NULL */
  char token_hash[TG_TOKEN_HASH_LEN + 1];
  tg_token_uses *token_uses; /* its last use, written between messages; NULL without token */
  tg_db *reader_db;  /* the reader's own, opened to check the token for a ping it answers */
  json_t *serving; /* id of the request being served, NULL between requests */
  /* Between the reader and the serving thread, under lock; changed is broadcast when the
   * reader adds to them, and when a cancellation arrives. */
  pthread_mutex_t lock;
  pthread_cond_t changed;
  tg_rpc_msg *queue; /* TG_MCP_STDIO_QUEUE_MAX + 1 of them: the one more, see take */
  size_t *sizes;     /* the bytes each is reckoned to hold (tg_rpc_msg.held) */
  size_t queued, queued_bytes;
  bool busy; /* the serving thread holds a message that may take long (see may_take_long) */
  bool takes_batches; /* the session takes JSON-RPC batches, as the serving thread last saw */
  bool negotiated;    /* the session negotiated its revision, for good; as the same saw */
  tg_mcp_question ask; /* the server's request a call waits on (one at a time), in asks */
  tg_mcp_questions asks;
  bool ended;       /* the reader stopped: end of input, or the failure in status */
  int status;
  /* When the lines the client can cause were last logged (see tg_log_may): a response no
   * request waits for, a message dropped for the full queue, a run that did not start. */
  _Atomic int64_t stray_logged_ms, dropped_logged_ms, run_logged_ms;
  bool run_due; /* the server's own run may open at its next call (see own_run) */
  /* The reader found the token revoked while a request was served: the request's
   * abandoned flag, so that the call fails before it commits, and its client gets its
   * outcome. */
  _Atomic bool revoked;
  int64_t next_token_check; /* the reader's, while a request is served (monotonic ms) */
  bool reader_stopped;      /* the reader was told to stop */
  /* Readable: stop (-1: never), which the watcher thread waits for, also once the input
   * ended; interrupted once it did. */
  int told_to_stop, watch_end[2];
  _Atomic bool interrupted;
  /* What the connection speaks, as the serving thread last saw; or 2026-07-28 once the
   * reader took a request of it on a connection that had not chosen yet. */
  tg_mcp_era era;
} conn;

/* Writes line (len bytes) whole, under c->writing. It goes a pipe's atomic size at a time,
 * each part once the output can take it, so that a client that stops reading blocks the
 * server only until it is told to stop: the output is then given up (a message cut short
 * cannot be followed by another), and every write after fails. */
static int send_line(conn *c, const char *line, size_t len) {
  while (len && !c->output_cut) {
    struct pollfd p[2] = {{.fd = c->out, .events = POLLOUT},
                          {.fd = c->told_to_stop, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return TG_E_IO;
    }
    if (!p[0].revents && p[1].revents) {
      tg_log(TG_LOG_WARN, "mcp: told to stop while the client reads no output: the message "
                          "being written is cut short");
      c->output_cut = true;
      break;
    }
    ssize_t n = write(c->out, line, len < PIPE_BUF ? len : PIPE_BUF);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue; /* EAGAIN: left non-blocking */
    if (n <= 0) return TG_E_IO;
    line += n;
    len -= (size_t)n;
  }
  return c->output_cut ? TG_E_IO : TG_OK;
}

/* Writes one encoded message (text, freed) as a line. */
static int write_text(conn *c, char *text) {
  if (!text) return TG_E_NOMEM;
  size_t len = strlen(text);
  text[len] = '\n'; /* its NUL becomes the newline */
  pthread_mutex_lock(&c->writing);
  int r = send_line(c, text, len + 1);
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
 * them is logged and tried again at the next check; only a dead output, or no memory to
 * announce them, ends the connection. */
static int check_lists(conn *c) {
  int r = tg_mcp_watch_check(c->req->watch, c->req->env, c->req->principal_id);
  if (r == TG_E_IO || r == TG_E_NOMEM) return r;
  if (r < 0) tg_log(TG_LOG_WARN, "mcp: the tool list could not be checked for changes (%d)", r);
  return TG_OK;
}

/* ---- the reader ---- */

static int token_stands_for_reader(conn *c);
static void wake(void *arg);

/* While a call runs, the reader looks at the token as the serving thread does when idle (and
 * as it answers a ping): once it is revoked, the request served counts as cancelled, so that
 * the call fails before it commits (at once if it waits on its client), and is answered with
 * how it ended; the serving thread then refuses what is left and the connection ends. */
static void cancel_for_revoked_token(conn *c) {
  if (atomic_exchange(&c->revoked, true)) return;
  tg_log(TG_LOG_WARN, "mcp: the token was revoked while a request was served: it is cancelled");
  wake(c);
}

/* Looks at the token, as the serving thread does when idle, every IDLE_TICK_MS while a
 * request is served; returns how long until the next look (ms), -1 without a token. */
static int check_token_while_busy(conn *c) {
  if (!c->token) return -1;
  int64_t now = tg_monotonic_ms();
  if (now >= c->next_token_check) {
    c->next_token_check = now + IDLE_TICK_MS;
    pthread_mutex_lock(&c->lock);
    bool busy = c->busy;
    pthread_mutex_unlock(&c->lock);
    if (busy && token_stands_for_reader(c) == TG_E_NOTFOUND) cancel_for_revoked_token(c);
  }
  int64_t left = c->next_token_check - tg_monotonic_ms();
  return left > 0 ? (int)left : 0;
}

/* Refills the chunk. Returns the bytes read, 0 at EOF, on a read error or when told to stop
 * (c->reader_stopped: a line begun is no message then). */
static size_t refill(conn *c) {
  for (;;) {
    struct pollfd p[2] = {{.fd = c->in, .events = POLLIN}, {.fd = c->stop[0], .events = POLLIN}};
    int ready = poll(p, 2, check_token_while_busy(c));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || p[1].revents) {
      c->reader_stopped = true;
      return 0;
    }
    if (ready == 0) continue;
    ssize_t n = read(c->in, c->chunk, READ_CHUNK);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    c->pos = 0;
    c->len = n > 0 ? (size_t)n : 0;
    return c->len;
  }
}

/* What reading one line or one message came to. */
enum { GOT_NOTHING, GOT_ONE, GOT_EOF, GOT_TOO_LONG };

/* Begins the scan of a line past the limit with what c->line holds of it. */
static void scan_kept(conn *c, size_t len) {
  tg_rpc_id_scan_init(&c->past);
  tg_rpc_id_scan_feed(&c->past, c->line, len);
}

/* Reads one line into c->line (*len bytes). Returns GOT_ONE, GOT_EOF or GOT_TOO_LONG (the
 * line was consumed, and scanned whole into c->past for the id its refusal names). */
static int read_line(conn *c, size_t *len) {
  bool too_long = false, any = false;
  *len = 0;
  for (;;) {
    if (c->pos == c->len && refill(c) == 0) {
      if (c->reader_stopped) return GOT_EOF;
      break;
    }
    char ch = c->chunk[c->pos++];
    any = true;
    if (ch == '\n') break;
    /* One byte past the limit: the CR of a message at the limit. */
    if (*len <= TG_RPC_MAX_BODY) {
      c->line[(*len)++] = ch;
      continue;
    }
    if (!too_long) scan_kept(c, *len);
    too_long = true;
    tg_rpc_id_scan_feed(&c->past, &ch, 1);
  }
  if (!any) return GOT_EOF;
  /* Tolerate CRLF framing from clients on other systems. */
  if (*len && c->line[*len - 1] == '\r') (*len)--;
  if (too_long) return GOT_TOO_LONG;
  if (*len <= TG_RPC_MAX_BODY) return GOT_ONE;
  scan_kept(c, *len); /* one byte past the limit, and no CR */
  return GOT_TOO_LONG;
}

static bool blank(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != ' ' && s[i] != '\t') return false;
  return true;
}

/* A message that could not be decoded (scanned as scan), answered with the error refusal,
 * that meant to answer the question waiting: that question gets an error for it, so that its
 * call fails at once instead of waiting out its time. After the refusal is written, so that
 * the client reads it before the call's answer. */
static int refuse_unreadable(conn *c, const tg_rpc_id_scan *scan, json_t *refusal) {
  _cleanup_json_ json_t *id = tg_rpc_response_id(scan);
  /* Kept past the write, which lets go of it. */
  _cleanup_json_ json_t *kept = json_incref(refusal);
  int r = write_message(c, refusal);
  /* Without memory for it, the question waits out its time, as for no answer. */
  if (id) tg_mcp_answer_unreadable(&c->asks, id, kept);
  return r;
}

/* The next message: GOT_ONE with *msg decoded, GOT_NOTHING (a blank line, or an error
 * already answered), GOT_EOF, or a TG_E_*. */
static int next_message(conn *c, tg_rpc_msg *msg) {
  size_t len;
  int got = read_line(c, &len);
  if (got == GOT_EOF) return got;
  if (got == GOT_ONE && blank(c->line, len)) return GOT_NOTHING;
  json_t *err = NULL;
  tg_rpc_id_scan scanned;
  if (got == GOT_TOO_LONG) {
    err = tg_rpc_too_large(&c->past);
    scanned = c->past;
  } else if (tg_rpc_decode(c->line, len, msg, &err) == 0) {
    return GOT_ONE;
  } else {
    tg_rpc_id_scan_init(&scanned);
    tg_rpc_id_scan_feed(&scanned, c->line, len);
  }
  if (!err) return TG_E_NOMEM;
  int r = refuse_unreadable(c, &scanned, err);
  return r < 0 ? r : GOT_NOTHING;
}

/* Serves msg (released) at once, ahead of the queue, when it is a cancellation or a response
 * (which goes to the call waiting for it): true, with *r the outcome. */
static bool take_at_once(conn *c, tg_rpc_msg *msg, int *r) {
  *r = TG_OK;
  if (tg_mcp_cancel_target(msg)) {
    tg_mcp_reply reply;
    *r = tg_mcp_handle(c->srv, c->req, msg, &reply);
  } else if (msg->kind == TG_RPC_RESPONSE) {
    int taken = tg_mcp_answer(&c->asks, msg);
    if (taken < 0) *r = taken;
    else if (!taken && tg_log_may(&c->stray_logged_ms))
      tg_log(TG_LOG_WARN, "mcp: a response to no request waiting for one; dropped (logged once "
                          "a minute at most)");
  } else {
    return false;
  }
  tg_rpc_msg_done(msg);
  return true;
}

/* A batch being read, for take_element_at_once. */
typedef struct batch_read {
  conn *c;
  const tg_rpc_msg *batch;
} batch_read;

/* take_at_once for a message of a batch (tg_rpc_batch_take), but for the cancellation of a
 * request of that batch: it stays, to be served in the batch's order, as over HTTP. */
static int take_element_at_once(void *arg, tg_rpc_msg *element) {
  const batch_read *b = arg;
  json_t *target = tg_mcp_cancel_target(element);
  if (target && tg_mcp_names_request(b->batch, target)) return 0;
  int r;
  return take_at_once(b->c, element, &r) ? (r < 0 ? r : 1) : 0;
}

/* The error refusing msg (code, why, data: stolen, may be NULL): a request's, or one naming
 * each request in a batch; NULL for a notification, and for a batch of them alone. */
static json_t *refusal_of(const tg_rpc_msg *msg, int code, const char *why, json_t *data) {
  json_t *refusal = tg_rpc_refusal(msg, code, why, data);
  if (msg->kind == TG_RPC_REQUEST || json_is_array(refusal)) return refusal;
  json_decref(refusal); /* one naming no request */
  return NULL;
}

/* Whether the token that named the principal (if one did) still stands, read through db:
 * TG_OK, TG_E_NOTFOUND once it is revoked (which ends the connection), or the failure of the
 * database, logged: nothing is served meanwhile, and the next message or idle tick looks
 * again. */
static int token_stands_in(conn *c, tg_db *db) {
  char id[TG_UUID_LEN + 1];
  int r = c->token ? tg_principal_by_token(db, c->token, id) : TG_OK;
  if (r < 0 && r != TG_E_NOTFOUND)
    tg_log(TG_LOG_WARN, "mcp: the token could not be checked: %s", tg_db_errmsg(db));
  return r;
}

static int token_stands(conn *c) { return token_stands_in(c, c->req->env->db); }

/* A message is served with the token: its use is written when due (at most once a minute). */
static void note_token_use(conn *c) {
  if (c->token_uses && tg_token_used(c->token_uses, c->token_hash))
    tg_token_uses_write(c->token_uses, c->req->env->db, false);
}

/* The same for the reader, which answers a ping while a call runs on the serving thread's
 * connection: through a connection of its own, opened at its first use. */
static int token_stands_for_reader(conn *c) {
  if (!c->token) return TG_OK;
  char *why = NULL;
  if (!c->reader_db && tg_db_open(c->req->env->data_dir, &c->reader_db, &why) < 0) {
    tg_log(TG_LOG_WARN, "mcp: the token could not be checked: %s", why ? why : "out of memory");
    free(why);
    c->reader_db = NULL;
    return TG_E_DB;
  }
  return token_stands_in(c, c->reader_db);
}

/* The answer to msg, a message that found the token no longer standing (r): for a request,
 * the error HTTP gives a revoked token (with its 401), or an internal error to retry when the
 * database could not say; NULL for notifications. */
static json_t *unstanding_refusal(const tg_rpc_msg *msg, int r) {
  bool revoked = r == TG_E_NOTFOUND;
  return refusal_of(msg, revoked ? TG_RPC_INVALID_REQUEST : TG_RPC_INTERNAL_ERROR,
                    revoked ? "The token this server runs with was revoked"
                            : "The token could not be checked; retry",
                    NULL);
}

/* Whether serving msg may take long: it holds a request other than a ping. */
static bool may_take_long(const tg_rpc_msg *msg) {
  return msg->kind == TG_RPC_REQUEST ? strcmp(msg->method, "ping") != 0
                                     : tg_mcp_holds_request(msg);
}

/* Whether msg, a 2026-07-28 request, will choose that era for a connection that has not
 * chosen yet (server/discover, a client's probe, chooses none). */
static bool chooses_modern(const tg_rpc_msg *msg) {
  return msg->kind == TG_RPC_REQUEST && tg_mcp_has_claim(msg) &&
         strcmp(msg->method, "server/discover") != 0;
}

/* Whether a message that may take long waits in the queue (under c->lock). */
static bool long_queued(const conn *c) {
  for (size_t i = 0; i < c->queued; i++)
    if (may_take_long(&c->queue[i])) return true;
  return false;
}

/* Takes one message off the reader (msg: moved into the queue or released). A cancellation
 * is served at once; the response a call waits for goes to it; so do those in a batch (but a
 * cancellation of a request of the same batch), when the session takes batches as far as the
 * reader knows (else they wait with the rest of the batch, which is served or refused in its
 * turn, as the session then stands; or it is refused at once, once the session negotiated a
 * revision that takes none). Requests are entered in flight as they are queued, so
 * that a cancellation finds them before they are served. When the queue is full (in
 * messages, or in bytes: one message always fits an empty queue) a request is refused and a
 * notification dropped: the reader never stops reading, so that a cancellation or a response
 * behind them still arrives. */
static int take(conn *c, tg_rpc_msg *msg) {
  size_t bytes = msg->held; /* a batch's, as it was read */
  int r;
  if (atomic_load(&c->interrupted)) { /* read before the stop: neither served nor answered */
    tg_rpc_msg_done(msg);
    return TG_OK;
  }
  if (take_at_once(c, msg, &r)) return r;
  pthread_mutex_lock(&c->lock);
  bool takes_batches = c->takes_batches, negotiated = c->negotiated;
  pthread_mutex_unlock(&c->lock);
  if (msg->kind == TG_RPC_BATCH && takes_batches &&
      ((r = tg_rpc_batch_take(msg, take_element_at_once, &(batch_read){c, msg})) < 0 ||
       json_array_size(msg->root) == 0)) {
    tg_rpc_msg_done(msg);
    return r;
  }
  if (tg_mcp_reuses_id_in_flight(c->req->inflight, c->req->watch, msg)) {
    r = write_message(c, refusal_of(msg, TG_RPC_INVALID_REQUEST, TG_MCP_INFLIGHT_REUSED_ID, NULL));
    tg_rpc_msg_done(msg);
    return r;
  }
  /* A batch on a session whose revision takes none is refused at once, as it would be in its
   * turn, rather than behind a call that may wait a minute on its client. */
  if (msg->kind == TG_RPC_BATCH && negotiated && !takes_batches) {
    r = write_message(c, tg_mcp_unbatched_refusal(msg));
    tg_rpc_msg_done(msg);
    return r;
  }
  pthread_mutex_lock(&c->lock);
  /* A plain ping that would wait behind a request other than a ping (alone or in a batch)
   * is answered here, at once: that request may take long (a call, served or just queued),
   * and a client checks with ping that the server lives. Behind notifications and pings
   * alone, it waits its turn: its answer then tells that they were served. (One with a
   * 2026-07-28 claim, or on a connection that speaks 2026-07-28, which has no ping, waits
   * its turn for its error.) */
  if (msg->kind == TG_RPC_REQUEST && strcmp(msg->method, "ping") == 0 &&
      (c->busy || long_queued(c)) && c->era != TG_MCP_ERA_MODERN && !tg_mcp_has_claim(msg)) {
    pthread_mutex_unlock(&c->lock);
    /* A revoked token is refused here too, and then cancels the call; the connection ends
     * once the call has. */
    int stands = token_stands_for_reader(c);
    r = write_message(c, stands == TG_OK ? tg_rpc_result(msg->id, json_object())
                                         : unstanding_refusal(msg, stands));
    if (stands == TG_E_NOTFOUND) cancel_for_revoked_token(c);
    tg_rpc_msg_done(msg);
    return r;
  }
  /* The notification that ends a 2025-11-25 handshake is never dropped: it turns on the
   * session's list changes. It may take the one slot more, and pass the byte bound, only as
   * it is sent (small): padded, or sent again and again, it would hold memory unbounded. */
  bool handshake = msg->kind == TG_RPC_NOTIFICATION &&
                   strcmp(msg->method, "notifications/initialized") == 0 && bytes <= 1024;
  bool room = (c->queued < TG_MCP_STDIO_QUEUE_MAX &&
               (!c->queued || c->queued_bytes + bytes <= TG_MCP_STDIO_QUEUE_MAX_BYTES)) ||
              (handshake && c->queued < TG_MCP_STDIO_QUEUE_MAX + 1);
  size_t waiting = c->queued, waiting_bytes = c->queued_bytes; /* for the log, as they were */
  r = room ? tg_mcp_enter_requests(c->req->inflight, msg) : TG_OK;
  if (room && r == TG_OK) {
    if (c->era == TG_MCP_ERA_NONE && chooses_modern(msg)) c->era = TG_MCP_ERA_MODERN;
    c->sizes[c->queued] = bytes;
    c->queue[c->queued++] = *msg;
    c->queued_bytes += bytes;
    pthread_cond_broadcast(&c->changed);
  }
  pthread_mutex_unlock(&c->lock);
  if (room && r == TG_OK) return TG_OK;
  if (!room) {
    if (tg_log_may(&c->dropped_logged_ms))
      tg_log(TG_LOG_WARN, "mcp: %zu messages (%zu bytes) wait to be served; dropping one "
             "(logged once a minute at most)", waiting, waiting_bytes);
    /* A request dropped is still answered, so that the client does not wait for it. */
    static const char why[] = "Too many requests wait to be served";
    json_t *data = json_pack("{s:i,s:I}", "max", TG_MCP_STDIO_QUEUE_MAX, "maxBytes",
                             (json_int_t)TG_MCP_STDIO_QUEUE_MAX_BYTES);
    json_t *refusal = refusal_of(msg, TG_RPC_INTERNAL_ERROR, why, data);
    if (refusal) r = write_message(c, refusal);
  }
  tg_rpc_msg_done(msg);
  return r;
}

static void *reader_main(void *arg) {
  conn *c = arg;
  int r = TG_OK;
  for (;;) {
    tg_rpc_msg msg;
    int got = next_message(c, &msg);
    if (got < 0 || got == GOT_EOF) {
      r = got < 0 ? got : TG_OK;
      break;
    }
    if (got == GOT_ONE && (r = take(c, &msg)) < 0) break;
  }
  pthread_mutex_lock(&c->lock);
  c->ended = true;
  c->status = r;
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

/* A cancellation reached the table of requests in flight: a call waiting looks again. */
static void wake(void *arg) {
  conn *c = arg;
  pthread_mutex_lock(&c->lock);
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
}

/* ---- the serving thread ---- */

/* A message to the client, from the dispatch, the watch or a question. */
static int io_send(void *self, json_t *msg) { return write_message(self, msg); }

/* The request the serving thread serves (id), or none (NULL). */
static void serving(void *arg, json_t *id) {
  conn *c = arg;
  c->serving = id;
}

/* Serves msg (released) taken from the queue; its requests leave the table of requests in
 * flight, where take entered them. */
static int serve_one(conn *c, tg_rpc_msg *msg) {
  tg_mcp_reply reply;
  bool request = msg->kind == TG_RPC_REQUEST;
  if (request) serving(c, msg->id);
  int r = msg->kind == TG_RPC_BATCH
              ? tg_mcp_handle_batch(c->srv, c->req, msg, serving, c, &reply)
              : tg_mcp_handle(c->srv, c->req, msg, &reply);
  if (request) serving(c, NULL);
  tg_mcp_leave_requests(c->req->inflight, msg);
  /* What the reader reads from now on is read as this session takes it; a ping read now
   * waits its turn, to be followed by the list check the serving thread makes. */
  pthread_mutex_lock(&c->lock);
  c->takes_batches = tg_mcp_takes_batches(c->req->session);
  c->negotiated = c->req->session->version[0] != '\0';
  c->busy = false;
  c->era = c->req->session->era;
  /* Not chosen yet (a server/discover served chooses none), a request queued may choose. */
  for (size_t i = 0; c->era == TG_MCP_ERA_NONE && i < c->queued; i++)
    if (chooses_modern(&c->queue[i])) c->era = TG_MCP_ERA_MODERN;
  pthread_mutex_unlock(&c->lock);
  if (r < 0) {
    json_t *err = refusal_of(msg, TG_RPC_INTERNAL_ERROR, "Out of memory", NULL);
    r = err ? write_message(c, err) : r;
  } else if (reply.text && atomic_load(&c->interrupted)) {
    free(reply.text); /* told to stop: a batch's parts that ended before it go unanswered too */
  } else if (reply.text) {
    r = write_text(c, reply.text);
  }
  tg_rpc_msg_done(msg);
  return r;
}

/* Whether the client can answer no more: its input ended, or its token was revoked. */
static bool answers_no_more_locked(void *self) {
  conn *c = self;
  return c->ended || atomic_load(&c->revoked);
}

/* Sends request to the client and waits for its response (the reader answers pings
 * meanwhile), as tg_mcp_ask does. */
static int io_ask(void *self, json_t *request, json_t **ret) {
  conn *c = self;
  tg_mcp_asker asker = {.self = c, .send = io_send, .gone_locked = answers_no_more_locked,
                        .inflight = c->req->inflight, .call_id = c->serving,
                        .timeout_ms = tg_mcp_ask_timeout_ms(c->srv)};
  return tg_mcp_ask(&c->asks, &asker, request, ret);
}

/* Refuses msg (released), the message that found the token no longer standing (r). Returns
 * TG_E_NOTFOUND for a revoked token, else TG_OK, or the output's failure. */
static int refuse_unstanding(conn *c, tg_rpc_msg *msg, int r) {
  json_t *refusal = unstanding_refusal(msg, r);
  r = r == TG_E_NOTFOUND ? r : TG_OK;
  tg_mcp_leave_requests(c->req->inflight, msg);
  if (refusal) {
    int w = write_message(c, refusal);
    if (w < 0) r = w;
  }
  tg_rpc_msg_done(msg);
  return r;
}

/* Waits for the next queued message (true), checking the lists while none comes; false
 * once the reader ended and the queue is empty, or a check failed (*status). */
static bool next_queued(conn *c, tg_rpc_msg *ret, int *status) {
  pthread_mutex_lock(&c->lock);
  c->busy = false; /* the message taken before, if any, was refused */
  /* The reader found the token revoked: nothing more to wait for. */
  while (!c->queued && !c->ended && !atomic_load(&c->revoked)) {
    int64_t until = tg_monotonic_ms() + IDLE_TICK_MS;
    for (int64_t left; !c->queued && !c->ended && !atomic_load(&c->revoked) &&
                       (left = until - tg_monotonic_ms()) > 0;)
      tg_timed_wait(&c->changed, &c->lock, left);
    if (c->queued || c->ended || atomic_load(&c->revoked)) break;
    pthread_mutex_unlock(&c->lock);
    /* Idle, it looks too: a revoked token ends the connection though no message comes, and
     * one that cannot be checked hears of no change. Expired tasks go; the count of the last
     * second's calls refused for their rate is written. */
    tg_mcp_tasks_drop_expired(c->srv->tasks);
    const tg_env *env = c->req->env;
    if (env->rate_limit) tg_call_write_rate_refusals(env->rate_limit, env->db, false);
    int stands = token_stands(c);
    *status = stands == TG_OK ? check_lists(c) : stands == TG_E_NOTFOUND ? stands : TG_OK;
    pthread_mutex_lock(&c->lock);
    if (*status < 0) break;
  }
  bool got = *status == 0 && c->queued;
  if (got) {
    c->busy = may_take_long(&c->queue[0]);
    *ret = c->queue[0];
    c->queued_bytes -= c->sizes[0];
    c->queued--;
    memmove(c->queue, c->queue + 1, c->queued * sizeof c->queue[0]);
    memmove(c->sizes, c->sizes + 1, c->queued * sizeof c->sizes[0]);
  } else if (*status == 0) {
    *status = atomic_load(&c->revoked) ? TG_E_NOTFOUND : c->status;
  }
  pthread_mutex_unlock(&c->lock);
  return got;
}

/* ---- the watcher of the signal to stop ---- */

/* Tells the reader, through its pipe, to end. */
static void stop_reader(conn *c) {
  if (write(c->stop[1], "", 1) != 1)
    tg_log(TG_LOG_WARN, "mcp: the reader could not be told to stop");
}

/* Waits for the signal to stop (c->told_to_stop) or for the end of serving (watch_end):
 * told to stop, it cancels what was read and not answered, and ends the reader, which may
 * have ended already (serving then goes on with the tasks' grace, which it also ends). */
static void *watcher_main(void *arg) {
  conn *c = arg;
  struct pollfd p[2] = {{.fd = c->told_to_stop, .events = POLLIN},
                        {.fd = c->watch_end[0], .events = POLLIN}};
  while (poll(p, 2, -1) < 0 && errno == EINTR) continue;
  if (p[1].revents || !p[0].revents) return NULL;
  tg_log(TG_LOG_INFO, "mcp: told to stop: the requests not answered yet, and the tasks, are "
                      "cancelled");
  atomic_store(&c->interrupted, true);
  tg_mcp_inflight_cancel_all(c->req->inflight);
  wake(c);
  stop_reader(c);
  return NULL;
}

/* Gives the tasks at work their grace, which a signal to stop ends: how many are left. */
static unsigned await_tasks(conn *c) {
  int64_t deadline = tg_monotonic_ms() + TG_MCP_STDIO_STOP_GRACE_MS;
  tg_mcp_tasks_stopping(c->srv->tasks);
  for (;;) {
    int64_t now = tg_monotonic_ms(), slice = now + 100;
    unsigned left = tg_mcp_tasks_await(c->srv->tasks, slice < deadline ? slice : deadline);
    if (!left || atomic_load(&c->interrupted) || tg_monotonic_ms() >= deadline) return left;
  }
}

/* The server's own run, for a call (tg_mcp_request.session_run), or NULL when it has none. An
 * agent's server opens it at its first call that its caller's rate lets through, as an HTTP
 * session does, so that a client that starts the server only to look (claude mcp list)
 * leaves no run; one whose agent is not active yet (draft, paused), at its first such call
 * once the agent is. One that cannot start is logged, its call served as a run of its own
 * (where a tool capped per run refuses it), and the next call tries again. Only the serving
 * thread serves calls, so this needs no lock. */
static const char *own_run(void *arg, tg_db *db) {
  conn *c = arg;
  const tg_mcp_server *srv = c->srv;
  if (!*srv->own_run && c->run_due) {
    const char *why = NULL;
    if (tg_run_open_session(db, c->req->principal_id, srv->run_holder, srv->own_run,
                            &c->run_due, &why) < 0) {
      c->run_due = true;
      if (tg_log_may(&c->run_logged_ms))
        tg_log(TG_LOG_ERROR, "mcp: the server's run could not start, so a call was served as "
               "a run of its own: %s (logged once a minute at most)", why);
    } else if (*srv->own_run) {
      tg_log(TG_LOG_INFO, "mcp: the server's calls are run %s", srv->own_run);
    }
  }
  return *srv->own_run ? srv->own_run : NULL;
}

/* Serves the queued messages, in order, until the reader ended and the queue is empty, or
 * serving fails: 0, or the failure (TG_E_NOTFOUND: the token was revoked). */
static int serve_queue(conn *c) {
  int r = 0;
  for (tg_rpc_msg msg; r == 0 && next_queued(c, &msg, &r);) {
    if (atomic_load(&c->interrupted)) { /* cancelled: not served, not answered */
      tg_mcp_leave_requests(c->req->inflight, &msg);
      tg_rpc_msg_done(&msg);
      continue;
    }
    int stands = token_stands(c);
    r = stands == TG_OK ? serve_one(c, &msg) : refuse_unstanding(c, &msg, stands);
    if (r == 0 && stands == TG_OK) r = check_lists(c);
    if (stands == TG_OK) note_token_use(c); /* after the answer, which it never holds up */
  }
  return r;
}

/* What is owed once no message is served any more, as serving ended (r): the counts not
 * written yet, the refusal of what still waited, and the ends of tasks and subscriptions. */
static void finish_serving(conn *c, int r) {
  const tg_env *env = c->req->env;
  tg_db_close(c->reader_db);
  if (c->token_uses) tg_token_uses_write(c->token_uses, env->db, true); /* the last minute's */
  if (env->rate_limit) tg_call_write_rate_refusals(env->rate_limit, env->db, true);
  /* What waited behind the message that found the token revoked is refused as that was. */
  for (size_t i = 0; i < c->queued; i++) {
    if (r == TG_E_NOTFOUND) refuse_unstanding(c, &c->queue[i], r);
    else tg_rpc_msg_done(&c->queue[i]);
  }
  /* Revoked, the token's tasks end saying so, as over HTTP. */
  if (r == TG_E_NOTFOUND) tg_mcp_tasks_end_token(c->srv->tasks, c->token_hash);
  unsigned working = r == TG_E_NOTFOUND ? 0 : await_tasks(c);
  if (working)
    tg_log(TG_LOG_WARN, "mcp: %u tasks still at work as serving ends are cancelled", working);
  /* Open subscriptions end with their result, as a server that ends them owes, once the
   * tasks they may follow said how they ended (those the grace did not see end, cancelled
   * first); not when told to stop, which answers nothing more. */
  tg_mcp_watch *watch = c->req->watch;
  json_t *meta = watch && !atomic_load(&c->interrupted) ? tg_mcp_result_meta(c->srv) : NULL;
  if (meta) {
    tg_mcp_tasks_cancel_left(c->srv->tasks);
    tg_mcp_watch_end(watch, meta);
  }
  json_decref(meta);
}

/* Frees what c holds of its own (its pipes, locks and buffers). */
static void conn_release(conn *c) {
  for (int i = 0; i < 2; i++) {
    if (c->stop[i] >= 0) close(c->stop[i]);
    if (c->watch_end[i] >= 0) close(c->watch_end[i]);
  }
  pthread_cond_destroy(&c->changed);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->writing);
  tg_token_uses_free(c->token_uses);
  free(c->sizes);
  free(c->queue);
  free(c->line);
  free(c->chunk);
}

int tg_mcp_stdio_serve(const tg_mcp_server *srv, const tg_env *env, const char *principal_id,
                       const char *token, FILE *in, FILE *out, int stop_fd) {
  /* One process, one client: every list change can reach it. */
  tg_mcp_server served = tg_mcp_server_copy(srv);
  served.list_changes = true;
  fflush(out); /* written through its descriptor from now on */
  conn c = {.in = fileno(in), .out = fileno(out), .stop = {-1, -1}, .watch_end = {-1, -1},
            .chunk = malloc(READ_CHUNK),
            .line = malloc(TG_RPC_MAX_BODY + 1),
            .queue = calloc(TG_MCP_STDIO_QUEUE_MAX + 1, sizeof(tg_rpc_msg)),
            .sizes = calloc(TG_MCP_STDIO_QUEUE_MAX + 1, sizeof(size_t)), .srv = &served,
            .token = token, .told_to_stop = stop_fd, .run_due = srv->own_run != NULL};
  pthread_mutex_init(&c.writing, NULL);
  pthread_mutex_init(&c.lock, NULL);
  pthread_cond_init(&c.changed, NULL);
  c.asks = (tg_mcp_questions){.lock = &c.lock, .changed = &c.changed, .at = &c.ask, .n = 1};
  tg_mcp_session session;
  tg_mcp_session_init(&session);
  tg_mcp_io io = {.self = &c, .send = io_send, .ask = io_ask};
  tg_mcp_request req = {.env = env, .principal_id = principal_id, .token_hash = c.token_hash,
                        .session = &session, .run_id = srv->run_id,
                        .session_run = srv->own_run ? own_run : NULL, .session_run_arg = &c,
                        .io = &io, .abandoned = &c.revoked};
  c.req = &req;
  int r = c.chunk && c.line && c.queue && c.sizes ? tg_mcp_server_prepare(&served, env)
                                                  : TG_E_NOMEM;
  if (r == 0 && token && (tg_sha256_hex(token, strlen(token), c.token_hash) < 0 ||
                          !(c.token_uses = tg_token_uses_new())))
    r = TG_E_NOMEM;
  if (r == 0) r = tg_mcp_inflight_new(wake, &c, &req.inflight);
  if (r == 0) r = tg_mcp_watch_new(io_send, &c, &req.watch);
  if (r == 0 && served.fixtures) tg_mcp_watch_prompts(req.watch);
  /* Not for a tool's children. */
  if (r == 0 && (pipe2(c.stop, O_CLOEXEC) != 0 || pipe2(c.watch_end, O_CLOEXEC) != 0))
    r = TG_E_IO;
  pthread_t reader, watcher;
  bool watching = r == 0 && stop_fd >= 0 && pthread_create(&watcher, NULL, watcher_main, &c) == 0;
  if (r == 0 && stop_fd >= 0 && !watching) r = TG_E_NOMEM;
  bool reading = r == 0 && pthread_create(&reader, NULL, reader_main, &c) == 0;
  if (r == 0 && !reading) r = TG_E_NOMEM;
  if (r == 0) r = serve_queue(&c);
  if (reading) {
    stop_reader(&c);
    pthread_join(reader, NULL);
  }
  finish_serving(&c, r);
  if (watching) {
    if (write(c.watch_end[1], "", 1) != 1)
      tg_log(TG_LOG_WARN, "mcp: the watcher could not be told to end");
    pthread_join(watcher, NULL);
  }
  tg_mcp_watch_free(req.watch);
  tg_mcp_inflight_free(req.inflight);
  tg_mcp_session_done(&session);
  tg_mcp_server_done(&served);
  conn_release(&c);
  return r < 0 && !(r == TG_E_IO && c.output_cut) ? r : 0;
}
