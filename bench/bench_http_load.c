/* A load generator for MCP Streamable HTTP: N keep-alive connections, each on its own thread,
 * each opening a 2025-11-25 session (initialize, notifications/initialized, then the
 * Mcp-Session-Id header) or speaking 2026-07-28 statelessly (--modern: params._meta and the
 * routing headers), then sending tools/call of one tool, tools/list, or both alternating
 * (--mix) for a given time; --mix ping sends ping, which no tool or database serves: the cost
 * of the transport and the JSON-RPC layer alone. Prints requests/s, p50/p90/p99 latency, errors and how many tools
 * the last tools/list answer held; a non-2xx status, a JSON-RPC error, a tool result with
 * isError, or an unreadable response is an error.
 *
 *   bench_http_load --url http://127.0.0.1:PORT/mcp [--connections N] [--duration S]
 *                   [--tool NAME] [--mix call|list|both|ping] [--modern]
 *
 * Blocking sockets and one thread per connection: the generator stays simple and, written in
 * C, is not the bottleneck at the concurrencies measured (1 to 64). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 1024
#define MAX_DURATION_S 600
#define MAX_RESPONSE (8u * 1024u * 1024u) /* bytes of one response we accept */
#define MAX_SAMPLES_PER_CONN (4u * 1024u * 1024u)
#define IO_TIMEOUT_S 30 /* a server silent this long fails the request */

typedef struct options {
  struct sockaddr_in addr;
  char host[96];
  char path[256];
  unsigned connections;
  unsigned duration_s;
  const char *tool;
  bool calls, lists, pings; /* what --mix sends */
  bool modern;
} options;

typedef struct conn {
  const options *o;
  int fd;
  char sid[128];
  char *buf; /* bytes read past the current response */
  size_t len, cap;
  uint32_t *lat_us; /* one latency per request */
  size_t n_lat;
  unsigned long errors;
  int64_t deadline_ns;
  long next_id;
  long listed; /* tools in the last tools/list answer; -1: none seen */
  char first_error[200]; /* what the first failed exchange got, for the report */
} conn;

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

static bool dial(conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->len = 0;
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0) return false;
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval t = {.tv_sec = IO_TIMEOUT_S};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
  return connect(c->fd, (const struct sockaddr *)&c->o->addr, sizeof c->o->addr) == 0;
}

/* Reads more bytes into c->buf; false on EOF, error or an oversized response. */
static bool fill(conn *c) {
  if (c->cap - c->len < 16384) {
    if (c->cap >= MAX_RESPONSE) return false;
    size_t cap = c->cap ? c->cap * 2 : 65536;
    char *grown = realloc(c->buf, cap + 1);
    if (!grown) return false;
    c->buf = grown;
    c->cap = cap;
  }
  ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
  if (n <= 0) return false;
  c->len += (size_t)n;
  c->buf[c->len] = 0;
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

/* Reads one response: its status, a malloc'd body (de-chunked) and whether it is SSE. */
static bool read_response(conn *c, int *status, char **body, bool *sse, bool *close_after) {
  char *end;
  while (!(c->buf && (end = strstr(c->buf, "\r\n\r\n"))))
    if (!fill(c)) return false;
  size_t head_len = (size_t)(end - c->buf) + 4;
  end[2] = 0; /* the head ends at its last header line's CRLF */
  if (sscanf(c->buf, "HTTP/1.%*d %d", status) != 1) return false;
  char value[256];
  *sse = header(c->buf, "Content-Type", value, sizeof value) && strcasestr(value, "text/event-stream");
  *close_after = header(c->buf, "Connection", value, sizeof value) && strcasestr(value, "close");
  bool chunked = header(c->buf, "Transfer-Encoding", value, sizeof value) && strcasestr(value, "chunked");
  if (header(c->buf, "Mcp-Session-Id", value, sizeof value) && strlen(value) < sizeof c->sid)
    memcpy(c->sid, value, strlen(value) + 1);
  long clen = header(c->buf, "Content-Length", value, sizeof value) ? strtol(value, NULL, 10) : -1;
  size_t off = head_len;
  size_t blen = 0;
  char *b = malloc(1);
  if (!b) return false;
  if (!chunked) {
    if (clen < 0 || (size_t)clen > MAX_RESPONSE) goto fail;
    while (c->len - off < (size_t)clen)
      if (!fill(c)) goto fail;
    char *grown = realloc(b, (size_t)clen + 1);
    if (!grown) goto fail;
    b = grown;
    memcpy(b, c->buf + off, (size_t)clen);
    blen = (size_t)clen;
    off += (size_t)clen;
  } else {
    for (;;) {
      char *eol;
      while (!(eol = memmem(c->buf + off, c->len - off, "\r\n", 2)))
        if (!fill(c)) goto fail;
      size_t size = strtoul(c->buf + off, NULL, 16);
      size_t data = (size_t)(eol - c->buf) + 2;
      if (size > MAX_RESPONSE || blen + size > MAX_RESPONSE) goto fail;
      while (c->len < data + size + 2)
        if (!fill(c)) goto fail;
      if (size == 0) {
        off = data + 2;
        break;
      }
      char *grown = realloc(b, blen + size + 1);
      if (!grown) goto fail;
      b = grown;
      memcpy(b + blen, c->buf + data, size);
      blen += size;
      off = data + size + 2;
    }
  }
  b[blen] = 0;
  memmove(c->buf, c->buf + off, c->len - off);
  c->len -= off;
  c->buf[c->len] = 0;
  *body = b;
  return true;
fail:
  free(b);
  return false;
}

/* Whether the answer is a success: a JSON-RPC result without isError. An SSE body counts by
 * its last message, the response. A result holding a tools array sets *listed to its size. */
static bool answer_ok(const char *body, bool sse, long *listed) {
  if (sse) {
    const char *last = NULL;
    for (const char *p = strstr(body, "data: "); p; p = strstr(p + 6, "data: ")) last = p + 6;
    if (!last) return false;
    body = last;
  }
  json_t *msg = json_loadb(body, sse ? strcspn(body, "\n") : strlen(body), 0, NULL);
  json_t *result = json_object_get(msg, "result");
  bool ok = json_is_object(result) && !json_is_true(json_object_get(result, "isError"));
  json_t *tools = json_object_get(result, "tools");
  if (json_is_array(tools)) *listed = (long)json_array_size(tools);
  json_decref(msg);
  return ok;
}

/* Sends one JSON-RPC message; when it is a request, waits for and checks its answer. */
static bool exchange(conn *c, const char *method, const char *name, const char *body, bool notification) {
  char extra[512] = "";
  if (c->o->modern)
    snprintf(extra, sizeof extra,
             "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: %s\r\n%s%s%s", method,
             name ? "Mcp-Name: " : "", name ? name : "", name ? "\r\n" : "");
  else if (c->sid[0])
    snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n", c->sid);
  char *req = NULL;
  int n = asprintf(&req,
                   "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                   "Accept: application/json, text/event-stream\r\n%sContent-Length: %zu\r\n\r\n%s",
                   c->o->path, c->o->host, extra, strlen(body), body);
  if (n < 0) return false;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (c->fd < 0 && !dial(c)) break;
    if (write(c->fd, req, (size_t)n) != n) {
      close(c->fd);
      c->fd = -1;
      continue; /* a keep-alive connection the server closed: once more on a new one */
    }
    int status = 0;
    char *answer = NULL;
    bool sse = false, close_after = false;
    bool read = read_response(c, &status, &answer, &sse, &close_after);
    if (!read || close_after) {
      close(c->fd);
      c->fd = -1;
    }
    if (!read) break;
    bool ok = status / 100 == 2 && (notification || answer_ok(answer, sse, &c->listed));
    if (!ok) note_error(c, method, status, answer);
    free(answer);
    free(req);
    return ok;
  }
  note_error(c, method, 0, NULL);
  free(req);
  return false;
}

static void *run(void *arg) {
  conn *c = arg;
  char body[1024];
  const char *meta = c->o->modern ? ",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                                    "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}"
                                  : "";
  if (!c->o->modern) {
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
             "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench_http_load\","
             "\"version\":\"1\"}}}");
    if (!exchange(c, "initialize", NULL, body, false) || !c->sid[0] ||
        !exchange(c, "notifications/initialized", NULL,
                  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", true)) {
      c->errors++;
      return NULL;
    }
  }
  while (now_ns() < c->deadline_ns && c->n_lat < MAX_SAMPLES_PER_CONN) {
    bool call = c->o->calls && (!c->o->lists || c->next_id % 2 == 0);
    const char *method = c->o->pings ? "ping" : call ? "tools/call" : "tools/list";
    long id = ++c->next_id;
    if (call)
      snprintf(body, sizeof body,
               "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
               "\"arguments\":{}%s}}", id, c->o->tool, meta);
    else
      snprintf(body, sizeof body,
               "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"%s\",\"params\":{%s}}", id,
               method, c->o->modern ? meta + 1 : "");
    int64_t t0 = now_ns();
    bool ok = exchange(c, method, call ? c->o->tool : NULL, body, false);
    int64_t us = (now_ns() - t0) / 1000;
    if (!ok) c->errors++;
    if (c->n_lat % 4096 == 0) {
      uint32_t *grown = realloc(c->lat_us, (c->n_lat + 4096) * sizeof *grown);
      if (!grown) break;
      c->lat_us = grown;
    }
    c->lat_us[c->n_lat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
  }
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
                  "                       [--modern]\n");
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
    } else {
      return usage(NULL);
    }
  }
  if (!url || !parse_url(url, &o)) return usage("--url must be http://IPV4:PORT/PATH");
  conn *conns = calloc(o.connections, sizeof *conns);
  pthread_t *threads = calloc(o.connections, sizeof *threads);
  if (!conns || !threads) return 1;
  int64_t start = now_ns();
  int64_t deadline = start + (int64_t)o.duration_s * 1000000000;
  unsigned started = 0;
  for (unsigned i = 0; i < o.connections; i++) {
    conns[i] = (conn){.o = &o, .fd = -1, .deadline_ns = deadline, .listed = -1};
    if (pthread_create(&threads[i], NULL, run, &conns[i]) != 0) break;
    started++;
  }
  size_t total = 0;
  unsigned long errors = started < o.connections ? o.connections - started : 0;
  long listed = -1;
  for (unsigned i = 0; i < started; i++) {
    pthread_join(threads[i], NULL);
    total += conns[i].n_lat;
    errors += conns[i].errors;
    if (conns[i].listed >= 0) listed = conns[i].listed;
  }
  double secs = (double)(now_ns() - start) / 1e9;
  uint32_t *all = malloc((total ? total : 1) * sizeof *all);
  if (!all) return 1;
  size_t k = 0;
  const char *first_error = NULL;
  for (unsigned i = 0; i < started; i++) {
    if (!first_error && conns[i].first_error[0]) first_error = conns[i].first_error;
    memcpy(all + k, conns[i].lat_us, conns[i].n_lat * sizeof *all);
    k += conns[i].n_lat;
    free(conns[i].lat_us);
    free(conns[i].buf);
    if (conns[i].fd >= 0) close(conns[i].fd);
  }
  qsort(all, total, sizeof *all, cmp_u32);
#define PCT(p) (total ? all[(size_t)((double)(total - 1) * (p))] / 1000.0 : 0.0)
  /* One line of key=value pairs, for people and for bench/http.sh alike. */
  printf("connections=%u duration_s=%.2f requests=%zu rps=%.0f p50_ms=%.3f p90_ms=%.3f "
         "p99_ms=%.3f errors=%lu listed_tools=%ld\n",
         o.connections, secs, total, (double)total / secs, PCT(0.50), PCT(0.90), PCT(0.99), errors,
         listed);
  if (first_error) fprintf(stderr, "bench_http_load: first error: %s\n", first_error);
  free(all);
  free(conns);
  free(threads);
  return errors ? 1 : 0;
}
