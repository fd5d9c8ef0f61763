/* A load generator for MCP Streamable HTTP: N keep-alive connections, each opening a
 * 2025-11-25 session (initialize, notifications/initialized, then the Mcp-Session-Id header)
 * or speaking 2026-07-28 statelessly (--modern: params._meta and the routing headers), then
 * sending tools/call of one tool, tools/list, or both alternating (--mix) for a given time;
 * --mix ping sends ping, which no tool or database serves: the cost of the transport and the
 * JSON-RPC layer alone. Prints requests/s (answered without error), p50/p90/p99/p99.9 latency,
 * errors, requests sent again on a new connection, and how many tools the last tools/list
 * answer held; a non-2xx status, a JSON-RPC error, an answer to another id, a tool result
 * with isError, or an unreadable response is an error. A session is ended (DELETE) after its
 * last request, outside the measure, so that a server that keeps state per session frees it.
 * --fresh asks the server to close the connection after each answer (Connection: close), so
 * that every request goes on a new one: what accepting a connection costs the server.
 *
 *   bench_http_load --url http://127.0.0.1:PORT/PATH [--connections N] [--duration S]
 *                   [--tool NAME] [--mix call|list|both|ping] [--modern] [--fresh]
 *
 * The connections are shared among one event loop (epoll) per online CPU, at most one per
 * connection: on a machine of few cores that the measured server shares, a thread per
 * connection would take the server's CPU in wake-ups and fill its run queue. Each connection
 * has one request in flight; its latency runs from the request's start (its connecting
 * too, when the connection is new) to the loop's waking to its answer's last bytes. The rate
 * counts from the first load request on, after the sessions opened. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 1024
#define MAX_DURATION_S 600
#define MAX_RESPONSE (8u * 1024u * 1024u) /* bytes of one response we accept */
#define MAX_SAMPLES_PER_CONN (4u * 1024u * 1024u)
#define IO_TIMEOUT_NS (30LL * 1000000000) /* a server silent this long fails the request */

typedef struct options {
  struct sockaddr_in addr;
  char host[96];
  char path[256];
  unsigned connections;
  unsigned duration_s;
  const char *tool;
  bool calls, lists, pings; /* what --mix sends */
  bool modern;
  bool fresh; /* Connection: close on every request */
} options;

/* Where a connection is in its script. */
typedef enum phase { INITIALIZE, INITIALIZED, LOAD, END_SESSION, DONE } phase;

typedef struct conn {
  const options *o;
  int fd;
  int epoll; /* its loop's */
  bool reused; /* the connection already carried an exchange: the server may have closed it */
  phase phase;
  char sid[128];
  char *buf; /* bytes read and not yet consumed */
  size_t len, cap;
  char *req; /* the request in flight, its length and how much of it is written */
  size_t req_len, req_sent;
  const char *method;
  long id; /* of the request in flight; -1 for a notification or a DELETE */
  bool notification, retried;
  bool failed; /* the request in flight could not be sent: the loop finishes it */
  bool watching_out; /* its loop waits for room to write (EPOLLOUT) as well */
  int64_t started_ns; /* when the request in flight began */
  uint32_t *lat_us; /* one latency per load request */
  size_t n_lat;
  unsigned long errors, load_errors, resent;
  int64_t load_from_ns; /* when its first load request began; 0: none yet */
  bool checked_list; /* a tools/list answer was read whole (its tools counted) */
  int64_t deadline_ns;
  long next_id;
  long listed; /* tools in the last tools/list answer; -1: none seen */
  char first_error[200]; /* what the first failed exchange got, for the report */
} conn;

/* The connections one thread drives. */
typedef struct loop {
  conn *conns;
  unsigned n;
} loop;

/* Keeps what a failed exchange of method got (HTTP status 0: no answer) if it is c's first. */
static void note_error(conn *c, const char *method, int status, const char *answer) {
  if (c->first_error[0]) return;
  snprintf(c->first_error, sizeof c->first_error, "%s: HTTP %d: %.120s", method, status,
           answer ? answer : "no answer (connection failed or closed)");
  for (char *p = c->first_error; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void hang_up(conn *c) {
  if (c->fd >= 0) close(c->fd); /* closing also leaves the epoll set */
  c->fd = -1;
  c->len = 0;
}

/* A new connection, watched by c's loop. It connects without blocking the loop: the first
 * write waits for it (EAGAIN, then EPOLLOUT), and a refusal fails that write. */
static bool dial(conn *c) {
  hang_up(c);
  c->reused = false;
  c->watching_out = false;
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (c->fd < 0) return false;
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
  if ((connect(c->fd, (const struct sockaddr *)&c->o->addr, sizeof c->o->addr) != 0 &&
       errno != EINPROGRESS) ||
      epoll_ctl(c->epoll, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    hang_up(c);
    return false;
  }
  return true;
}

/* The value of header name in the head (NUL-terminated), copied into out. */
static bool header(const char *head, const char *name, char *out, size_t size) {
  size_t n = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
    if (strncasecmp(p + 2, name, n) != 0 || p[2 + n] != ':') continue;
    const char *v = p + 3 + n;
    while (*v == ' ') v++;
    size_t len = strcspn(v, "\r\n");
    if (len >= size) return false;
    memcpy(out, v, len);
    out[len] = 0;
    return true;
  }
  return false;
}

typedef struct response {
  int status;
  char *body; /* malloc'd, de-chunked, NUL-terminated */
  bool sse, close_after;
} response;

enum { PARSE_FAILED = -1, PARSE_MORE = 0, PARSE_DONE = 1 };

/* Takes one whole response off the front of c->buf when it is all there. */
static int parse_response(conn *c, response *r) {
  char *end = c->buf ? strstr(c->buf, "\r\n\r\n") : NULL;
  if (!end) return c->len > 65536 ? PARSE_FAILED : PARSE_MORE;
  size_t head_len = (size_t)(end - c->buf) + 4;
  char saved = end[2];
  end[2] = 0; /* the head ends at its last header line's CRLF */
  char value[256];
  long clen = -1;
  bool chunked = false;
  int ok = sscanf(c->buf, "HTTP/1.%*d %d", &r->status) == 1;
  if (ok) {
    r->sse = header(c->buf, "Content-Type", value, sizeof value) && strcasestr(value, "text/event-stream");
    r->close_after = header(c->buf, "Connection", value, sizeof value) && strcasestr(value, "close");
    chunked = header(c->buf, "Transfer-Encoding", value, sizeof value) && strcasestr(value, "chunked");
    if (header(c->buf, "Content-Length", value, sizeof value)) clen = strtol(value, NULL, 10);
    if (header(c->buf, "Mcp-Session-Id", value, sizeof value) && strlen(value) < sizeof c->sid)
      memcpy(c->sid, value, strlen(value) + 1);
  }
  end[2] = saved;
  if (!ok) return PARSE_FAILED;
  /* First where the body ends, without copying: most calls end here with PARSE_MORE. */
  size_t off = head_len;
  if (!chunked) {
    if (clen < 0 || (size_t)clen > MAX_RESPONSE) return PARSE_FAILED;
    if (c->len - off < (size_t)clen) return PARSE_MORE;
  } else {
    size_t total = 0;
    for (;;) {
      char *eol = memmem(c->buf + off, c->len - off, "\r\n", 2);
      if (!eol) return PARSE_MORE;
      size_t size = strtoul(c->buf + off, NULL, 16);
      size_t data = (size_t)(eol - c->buf) + 2;
      if (size > MAX_RESPONSE || (total += size) > MAX_RESPONSE) return PARSE_FAILED;
      if (c->len < data + size + 2) return PARSE_MORE;
      off = data + size + 2;
      if (size == 0) break;
    }
  }
  /* Then the body, de-chunked. */
  r->body = malloc(chunked ? off - head_len + 1 : (size_t)clen + 1);
  if (!r->body) return PARSE_FAILED;
  size_t blen = 0;
  if (!chunked) {
    memcpy(r->body, c->buf + head_len, (size_t)clen);
    blen = (size_t)clen;
    off = head_len + (size_t)clen;
  } else {
    for (size_t at = head_len; at < off;) {
      char *eol = memmem(c->buf + at, c->len - at, "\r\n", 2);
      size_t size = strtoul(c->buf + at, NULL, 16);
      size_t data = (size_t)(eol - c->buf) + 2;
      memcpy(r->body + blen, c->buf + data, size);
      blen += size;
      at = data + size + 2;
    }
  }
  r->body[blen] = 0;
  memmove(c->buf, c->buf + off, c->len - off);
  c->len -= off;
  c->buf[c->len] = 0;
  return PARSE_DONE;
}

/* The JSON-RPC message an answer carries: the body, or for an SSE body the data of its last
 * event (the response), which starts a line "data:". Sets *len. */
static const char *message_of(const char *body, bool sse, size_t *len) {
  if (!sse) {
    *len = strlen(body);
    return body;
  }
  const char *last = NULL;
  for (const char *p = body; p; p = strchr(p, '\n')) {
    if (*p == '\n') p++;
    if (strncmp(p, "data:", 5) == 0) last = p + 5 + (p[5] == ' ');
  }
  *len = last ? strcspn(last, "\n") : 0;
  return last;
}

/* Whether msg (n bytes) answers request id with a result that is no tool error: a scan of
 * its members, for the top-level "id", "result" and "error" and the result's "isError",
 * without building it (parsing a 30 KB list whole would cost the generator more than the
 * server spends on it). A string value of those names is skipped like any other. */
static bool scan_ok(const char *msg, size_t n, long id) {
  int depth = 0;
  bool in_result = false, has_result = false, has_error = false, id_ok = false, is_error = false;
  char key[16] = "";
  for (size_t i = 0; i < n; i++) {
    char ch = msg[i];
    if (ch == '"') { /* a string: a key when a colon follows */
      size_t from = ++i;
      while (i < n && msg[i] != '"') i += msg[i] == '\\' ? 2 : 1;
      size_t j = i + 1;
      while (j < n && (msg[j] == ' ' || msg[j] == '\t' || msg[j] == '\n' || msg[j] == '\r')) j++;
      bool is_key = j < n && msg[j] == ':';
      size_t klen = i - from;
      if (!is_key || klen >= sizeof key) continue;
      memcpy(key, msg + from, klen);
      key[klen] = 0;
      const char *v = msg + j + 1;
      while (*v == ' ') v++;
      if (depth == 1 && strcmp(key, "id") == 0) id_ok = strtol(v, NULL, 10) == id && *v != '"';
      if (depth == 1 && strcmp(key, "error") == 0) has_error = true;
      if (depth == 1 && strcmp(key, "result") == 0) has_result = in_result = *v == '{';
      if (depth == 2 && in_result && strcmp(key, "isError") == 0) is_error = strncmp(v, "true", 4) == 0;
    } else if (ch == '{' || ch == '[') {
      depth++;
    } else if (ch == '}' || ch == ']') {
      if (--depth == 1) in_result = false;
    }
  }
  return depth == 0 && id_ok && has_result && !has_error && !is_error;
}

/* Whether the answer to request id is a success: a JSON-RPC result without isError. The
 * first tools/list answer of a connection is also read whole, to count its tools. */
static bool answer_ok(conn *c, const char *body, bool sse, long id) {
  size_t n = 0;
  const char *msg = message_of(body, sse, &n);
  if (!msg || !scan_ok(msg, n, id)) return false;
  if (strcmp(c->method, "tools/list") != 0 || c->checked_list) return true;
  json_t *parsed = json_loadb(msg, n, 0, NULL);
  json_t *tools = json_object_get(json_object_get(parsed, "result"), "tools");
  bool ok = json_is_array(tools);
  if (ok) c->listed = (long)json_array_size(tools);
  c->checked_list = ok;
  json_decref(parsed);
  return ok;
}

/* Writes what is left of the request in flight; false when the connection failed. */
static bool push(conn *c) {
  while (c->req_sent < c->req_len) {
    ssize_t n = send(c->fd, c->req + c->req_sent, c->req_len - c->req_sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return false;
    c->req_sent += (size_t)n;
  }
  /* The loop's watch changes only when a request could not be written whole: most requests
   * cost no epoll_ctl, which would take a system call from the servers' share of the CPU. */
  bool want_out = c->req_sent < c->req_len;
  if (want_out == c->watching_out) return true;
  c->watching_out = want_out;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0),
                           .data.ptr = c};
  return epoll_ctl(c->epoll, EPOLL_CTL_MOD, c->fd, &ev) == 0;
}

/* Sends the request in flight on the kept-alive connection, or on a new one. */
static bool transmit(conn *c) {
  c->req_sent = 0;
  return (c->fd >= 0 || dial(c)) && push(c);
}

/* Starts one JSON-RPC message (body; NULL: the DELETE that ends the session) answering id
 * (-1: none is awaited, only a status). */
static void begin(conn *c, const char *method, const char *name, const char *body, long id) {
  char extra[512] = "";
  if (c->o->modern)
    snprintf(extra, sizeof extra,
             "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: %s\r\n%s%s%s", method,
             name ? "Mcp-Name: " : "", name ? name : "", name ? "\r\n" : "");
  else if (c->sid[0])
    snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n", c->sid);
  free(c->req);
  c->req = NULL;
  const char *closing = c->o->fresh ? "Connection: close\r\n" : "";
  int n = body ? asprintf(&c->req,
                          "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          "Accept: application/json, text/event-stream\r\n%s%sContent-Length: "
                          "%zu\r\n\r\n%s",
                          c->o->path, c->o->host, extra, closing, strlen(body), body)
                 : asprintf(&c->req, "DELETE %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n", c->o->path,
                            c->o->host, extra, closing);
  c->method = method;
  c->id = id;
  c->notification = id < 0;
  c->retried = false;
  c->started_ns = now_ns();
  if (n < 0) c->req = NULL;
  c->req_len = n < 0 ? 0 : (size_t)n;
  bool sent = n >= 0 && transmit(c);
  if (!sent && n >= 0 && c->reused) { /* a kept-alive connection the server closed: once more */
    hang_up(c);
    c->retried = true;
    c->resent++;
    sent = transmit(c);
  }
  if (!sent) {
    note_error(c, method, 0, NULL);
    hang_up(c);
    c->failed = true; /* not finished here: a server that refuses every connection would
                       * otherwise recurse through finish and next until the deadline */
  }
}

/* The next request of c's script, or the end of it. */
static void next(conn *c) {
  char body[1024];
  if (c->phase == INITIALIZE) {
    begin(c, "initialize", NULL,
          "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
          "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench_http_load\","
          "\"version\":\"1\"}}}",
          0);
    return;
  }
  if (c->phase == INITIALIZED) {
    begin(c, "notifications/initialized", NULL,
          "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", -1);
    return;
  }
  if (c->phase == LOAD && (now_ns() >= c->deadline_ns || c->n_lat >= MAX_SAMPLES_PER_CONN))
    c->phase = c->sid[0] ? END_SESSION : DONE;
  if (c->phase == END_SESSION) {
    begin(c, "DELETE", NULL, NULL, -1);
    return;
  }
  if (c->phase != LOAD) {
    c->phase = DONE;
    hang_up(c);
    return;
  }
  if (!c->load_from_ns) c->load_from_ns = now_ns();
  const char *meta = c->o->modern ? ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                                    "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}"
                                  : "";
  bool call = c->o->calls && (!c->o->lists || c->next_id % 2 == 0);
  const char *method = c->o->pings ? "ping" : call ? "tools/call" : "tools/list";
  long id = ++c->next_id;
  if (call)
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
             "\"arguments\":{}%s}}", id, c->o->tool, meta);
  else
    snprintf(body, sizeof body, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"%s\",\"params\":{%s}}",
             id, method, c->o->modern ? meta + 1 : "");
  begin(c, method, call ? c->o->tool : NULL, body, id);
}

/* Records the outcome of the request in flight, which ended at ended_ns, and moves c on. */
static void finish(conn *c, bool ok, int64_t ended_ns) {
  if (c->phase == LOAD) {
    int64_t us = (ended_ns - c->started_ns) / 1000;
    if (c->n_lat % 4096 == 0) {
      uint32_t *grown = realloc(c->lat_us, (c->n_lat + 4096) * sizeof *grown);
      if (!grown) {
        c->errors++;
        c->phase = DONE;
        hang_up(c);
        return;
      }
      c->lat_us = grown;
    }
    c->lat_us[c->n_lat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    c->load_errors += !ok;
  }
  if (!ok) c->errors++;
  if (c->phase == INITIALIZE) c->phase = ok ? INITIALIZED : DONE;
  else if (c->phase == INITIALIZED) c->phase = ok ? LOAD : DONE;
  else if (c->phase == END_SESSION) c->phase = DONE;
  if (c->phase == DONE) hang_up(c);
  else next(c);
}

/* The connection ended or failed before the answer: a kept-alive connection the server
 * closed gets the request once more on a new one. */
static void broken(conn *c) {
  bool again = c->reused && !c->retried && c->len == 0;
  hang_up(c);
  if (again) {
    c->retried = true;
    c->resent++;
    if (transmit(c)) return;
    hang_up(c);
  }
  note_error(c, c->method, 0, NULL);
  finish(c, false, now_ns());
}

/* Reads what arrived on c, known at woke_ns (with the server's side closed: peer_closed),
 * and acts on a whole answer: its latency ends at woke_ns, since what the loop did for other
 * connections since then (checking their answers) is the generator's time, not the server's. */
static void readable(conn *c, int64_t woke_ns, bool peer_closed) {
  bool ended = false; /* the server closed the connection, or it failed */
  for (;;) {
    if (c->cap - c->len < 16384) {
      size_t cap = c->cap ? c->cap * 2 : 65536;
      char *grown = cap <= 2 * (size_t)MAX_RESPONSE ? realloc(c->buf, cap + 1) : NULL;
      if (!grown) return broken(c);
      c->buf = grown;
      c->cap = cap;
    }
    size_t room = c->cap - c->len;
    ssize_t n = read(c->fd, c->buf + c->len, room);
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      ended = true;
      break;
    }
    c->len += (size_t)n;
    c->buf[c->len] = 0;
    /* A read that did not fill the room took what there was: the loop's wait (level-triggered)
     * tells of anything after, without a read here that would find nothing. Unless the server
     * closed its side: then the end is read now, so that the next request goes on a new
     * connection instead of failing on this one. */
    if ((size_t)n < room && !peer_closed) break;
  }
  response r = {0};
  int parsed = parse_response(c, &r);
  if (parsed == PARSE_MORE) {
    if (ended) broken(c);
    return;
  }
  if (parsed == PARSE_FAILED) {
    note_error(c, c->method, 0, "an unreadable response");
    hang_up(c);
    return finish(c, false, now_ns());
  }
  c->reused = true;
  bool ok = r.status / 100 == 2 && (c->notification || answer_ok(c, r.body, r.sse, c->id));
  if (!ok) note_error(c, c->method, r.status, r.body);
  if (ok && c->phase == INITIALIZE && !c->sid[0]) { /* no session to go on with */
    ok = false;
    note_error(c, c->method, r.status, "an answer without Mcp-Session-Id");
  }
  free(r.body);
  if (r.close_after || ended) hang_up(c);
  finish(c, ok, woke_ns);
}

static void *run(void *arg) {
  loop *l = arg;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  for (unsigned i = 0; i < l->n; i++) {
    conn *c = &l->conns[i];
    c->epoll = ep;
    if (ep < 0) {
      c->errors++;
      c->phase = DONE;
    } else {
      next(c);
    }
  }
  struct epoll_event events[64];
  for (;;) {
    unsigned busy = 0, failed = 0;
    int64_t now = now_ns();
    for (unsigned i = 0; i < l->n; i++) {
      conn *c = &l->conns[i];
      if (c->phase == DONE) continue;
      if (c->failed) {
        c->failed = false;
        finish(c, false, now_ns());
      } else if (now - c->started_ns > IO_TIMEOUT_NS) { /* a silent server fails the request */
        note_error(c, c->method, 0, "no answer in 30 s");
        hang_up(c);
        finish(c, false, now_ns());
      }
      busy += c->phase != DONE;
      failed += c->failed;
    }
    if (!busy) break;
    int n = epoll_wait(ep, events, 64, failed ? 0 : 1000);
    int64_t woke_ns = now_ns();
    for (int i = 0; i < n; i++) {
      conn *c = events[i].data.ptr;
      if (c->fd < 0) continue;
      if (events[i].events & EPOLLOUT && !push(c)) broken(c);
      else if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
        readable(c, woke_ns, events[i].events & (EPOLLRDHUP | EPOLLHUP));
      /* (a write that failed already handled the connection's end) */
    }
  }
  if (ep >= 0) close(ep);
  return NULL;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static int usage(const char *why) {
  if (why) fprintf(stderr, "bench_http_load: %s\n", why);
  fprintf(stderr, "usage: bench_http_load --url http://127.0.0.1:PORT/PATH [--connections N]\n"
                  "                       [--duration SECONDS] [--tool NAME] [--mix call|list|both|ping]\n"
                  "                       [--modern] [--fresh]\n");
  return 2;
}

static bool parse_url(const char *url, options *o) {
  unsigned port = 0;
  char ip[64];
  int used = 0;
  if (sscanf(url, "http://%63[0-9.]:%u%n", ip, &port, &used) != 2 || port == 0 || port > 65535)
    return false;
  const char *path = url + used;
  if (*path != '/' || strlen(path) >= sizeof o->path || strpbrk(path, " \r\n")) return false;
  o->addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, ip, &o->addr.sin_addr) != 1) return false;
  snprintf(o->host, sizeof o->host, "%.63s:%u", ip, port);
  snprintf(o->path, sizeof o->path, "%s", path);
  return true;
}

static bool parse_count(const char *text, unsigned max, unsigned *out) {
  char *end = NULL;
  unsigned long v = text ? strtoul(text, &end, 10) : 0;
  if (!text || !*text || *end || v < 1 || v > max) return false;
  *out = (unsigned)v;
  return true;
}

int main(int argc, char **argv) {
  options o = {.connections = 1, .duration_s = 5, .tool = "test_simple_text", .calls = true,
               .lists = true};
  const char *url = NULL;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--url") == 0 && val) url = argv[++i];
    else if (strcmp(arg, "--connections") == 0) {
      if (!parse_count(val, MAX_CONNECTIONS, &o.connections)) return usage("--connections takes 1 to 1024");
      i++;
    } else if (strcmp(arg, "--duration") == 0) {
      if (!parse_count(val, MAX_DURATION_S, &o.duration_s)) return usage("--duration takes 1 to 600");
      i++;
    } else if (strcmp(arg, "--tool") == 0 && val && strlen(val) < 128 && !strpbrk(val, "\"\\\r\n")) {
      o.tool = argv[++i];
    } else if (strcmp(arg, "--mix") == 0 && val) {
      const char *mix = argv[++i];
      if (strcmp(mix, "call") == 0) o.lists = false;
      else if (strcmp(mix, "list") == 0) o.calls = false;
      else if (strcmp(mix, "ping") == 0) o.calls = o.lists = false, o.pings = true;
      else if (strcmp(mix, "both") != 0) return usage("--mix takes call, list, both or ping");
    } else if (strcmp(arg, "--modern") == 0) {
      o.modern = true;
    } else if (strcmp(arg, "--fresh") == 0) {
      o.fresh = true;
    } else {
      return usage(NULL);
    }
  }
  if (!url || !parse_url(url, &o)) return usage("--url must be http://IPV4:PORT/PATH");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned n_loops = cpus < 1 ? 1 : cpus < (long)o.connections ? (unsigned)cpus : o.connections;
  conn *conns = calloc(o.connections, sizeof *conns);
  loop *loops = calloc(n_loops, sizeof *loops);
  pthread_t *threads = calloc(n_loops, sizeof *threads);
  if (!conns || !loops || !threads) return 1;
  int64_t start = now_ns();
  int64_t deadline = start + (int64_t)o.duration_s * 1000000000;
  for (unsigned i = 0; i < o.connections; i++)
    conns[i] = (conn){.o = &o, .fd = -1, .epoll = -1, .phase = o.modern ? LOAD : INITIALIZE,
                      .deadline_ns = deadline, .listed = -1};
  /* Loop i drives a contiguous share of the connections, the first ones one more. */
  unsigned started = 0, next_conn = 0;
  for (unsigned i = 0; i < n_loops; i++) {
    loops[i] = (loop){.conns = conns + next_conn,
                      .n = o.connections / n_loops + (i < o.connections % n_loops)};
    next_conn += loops[i].n;
    if (pthread_create(&threads[i], NULL, run, &loops[i]) != 0) break;
    started++;
  }
  size_t total = 0;
  unsigned long errors = 0, load_errors = 0, resent = 0;
  long listed = -1;
  int64_t load_from = 0;
  for (unsigned i = 0; i < started; i++) pthread_join(threads[i], NULL);
  for (unsigned i = started; i < n_loops; i++) errors += loops[i].n; /* never ran */
  for (unsigned i = 0; i < o.connections; i++) {
    total += conns[i].n_lat;
    errors += conns[i].errors;
    load_errors += conns[i].load_errors;
    resent += conns[i].resent;
    if (conns[i].listed >= 0) listed = conns[i].listed;
    if (conns[i].load_from_ns && (!load_from || conns[i].load_from_ns < load_from))
      load_from = conns[i].load_from_ns;
  }
  /* From the first load request to the last answer: opening the sessions is not the load. */
  double secs = (double)(now_ns() - (load_from ? load_from : start)) / 1e9;
  uint32_t *all = malloc((total ? total : 1) * sizeof *all);
  if (!all) return 1;
  size_t k = 0;
  const char *first_error = NULL;
  for (unsigned i = 0; i < o.connections; i++) {
    if (!first_error && conns[i].first_error[0]) first_error = conns[i].first_error;
    memcpy(all + k, conns[i].lat_us, conns[i].n_lat * sizeof *all);
    k += conns[i].n_lat;
    free(conns[i].lat_us);
    free(conns[i].buf);
    free(conns[i].req);
  }
  qsort(all, total, sizeof *all, cmp_u32);
#define PCT(p) (total ? all[(size_t)((double)(total - 1) * (p))] / 1000.0 : 0.0)
  /* One line of key=value pairs, for people and for bench/http.sh alike. */
  printf("connections=%u duration_s=%.2f requests=%zu rps=%.0f p50_ms=%.3f p90_ms=%.3f "
         "p99_ms=%.3f p999_ms=%.3f errors=%lu resent=%lu listed_tools=%ld\n",
         o.connections, secs, total, (double)(total - load_errors) / secs, PCT(0.50), PCT(0.90),
         PCT(0.99), PCT(0.999), errors, resent, listed);
  if (first_error) fprintf(stderr, "bench_http_load: first error: %s\n", first_error);
  free(all);
  free(conns);
  free(loops);
  free(threads);
  return errors ? 1 : 0;
}
