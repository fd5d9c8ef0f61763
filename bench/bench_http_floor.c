/* The floor of the Streamable HTTP benchmark: a server that answers what bench_http_load sends
 * with fixed JSON-RPC results and does no other work. It parses no JSON (a request's id and
 * method are found by a scan of its body), keeps no session, runs no tool, opens no database
 * and uses no HTTP library. What it reaches beside the load generator is the most any server
 * can show on this machine with that generator: the rest of the cores goes to the generator's
 * own work and the kernel's (sockets, wake-ups). It serves nothing but the generator's
 * requests; a request it cannot read closes its connection.
 *
 *   bench_http_floor   (listens on a free loopback port, logged as "listening on
 *                       127.0.0.1:PORT"; stops on SIGTERM or SIGINT)
 *
 * Connections are shared among one event loop (epoll) per online CPU, as the generator's. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_REQUEST 65536 /* head and body of one request */
#define MAX_LOOPS 64

typedef struct conn {
  int fd;
  size_t len;
  char buf[MAX_REQUEST + 1]; /* bytes read and not yet answered, NUL-terminated */
} conn;

static int listener = -1;

/* Where the head ends in c's bytes (after its blank line), or 0 while it has not all come. */
static size_t head_length(const conn *c) {
  const char *end = strstr(c->buf, "\r\n\r\n");
  return end ? (size_t)(end - c->buf) + 4 : 0;
}

/* The value of header name in head (its text up to the blank line), or NULL. */
static const char *header(const char *head, size_t head_len, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p && (size_t)(p - head) + 2 < head_len;
       p = strstr(p + 2, "\r\n"))
    if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') return p + 3 + n;
  return NULL;
}

/* The result of the request body holds, by its method (found by a scan). */
static const char *result_of(const char *body) {
  if (strstr(body, "\"method\":\"initialize\""))
    return "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{}},"
           "\"serverInfo\":{\"name\":\"floor\",\"version\":\"1\"}}";
  if (strstr(body, "\"method\":\"tools/list\""))
    return "{\"tools\":[{\"name\":\"test_simple_text\",\"inputSchema\":{\"type\":\"object\"}}]}";
  if (strstr(body, "\"method\":\"tools/call\""))
    return "{\"content\":[{\"type\":\"text\",\"text\":\"This is a simple text response for "
           "testing.\"}]}";
  return "{}";
}

/* Writes the answer of one request (head and body as read) to fd: 202 for a notification, 200
 * with its result for a request (and a session id for initialize), 200 for a DELETE. */
static bool answer(int fd, const char *head, const char *body, bool close_after) {
  char out[1024];
  const char *id = strstr(body, "\"id\":");
  const char *closing = close_after ? "Connection: close\r\n" : "";
  bool ends_session = strncmp(head, "DELETE ", 7) == 0;
  int n;
  if (ends_session || !id) {
    n = snprintf(out, sizeof out, "HTTP/1.1 %s\r\n%sContent-Length: 0\r\n\r\n",
                 ends_session ? "200 OK" : "202 Accepted", closing);
  } else {
    char json[512];
    int json_len = snprintf(json, sizeof json, "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"result\":%s}",
                            strtol(id + 5, NULL, 10), result_of(body));
    bool opens = strstr(body, "\"method\":\"initialize\"") != NULL;
    n = snprintf(out, sizeof out,
                 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s%sContent-Length: "
                 "%d\r\n\r\n%s",
                 opens ? "Mcp-Session-Id: floor\r\n" : "", closing, json_len, json);
  }
  /* An answer is far under a socket's buffer, so one send takes it whole unless the client
   * stopped reading or left: its connection is then closed (MSG_NOSIGNAL: no SIGPIPE). */
  return n > 0 && (size_t)n < sizeof out && send(fd, out, (size_t)n, MSG_NOSIGNAL) == n;
}

/* Answers every whole request c holds. False: c is to be closed (unreadable, or asked to). */
static bool serve(conn *c) {
  for (;;) {
    size_t head_len = head_length(c);
    if (!head_len) return c->len < MAX_REQUEST;
    const char *length = header(c->buf, head_len, "Content-Length");
    const char *connection = header(c->buf, head_len, "Connection");
    size_t body_len = length ? strtoul(length, NULL, 10) : 0;
    if (body_len > MAX_REQUEST - head_len) return false;
    if (c->len < head_len + body_len) return true;
    bool close_after =
        connection && strncasecmp(connection + strspn(connection, " "), "close", 5) == 0;
    char *body = c->buf + head_len;
    char after = body[body_len];
    body[body_len] = 0;
    bool sent = answer(c->fd, c->buf, body, close_after);
    body[body_len] = after;
    if (!sent || close_after) return false;
    c->len -= head_len + body_len;
    memmove(c->buf, body + body_len, c->len + 1);
  }
}

static void accept_one(int epoll) {
  int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
  if (fd < 0) return; /* another loop took it */
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  conn *c = malloc(sizeof *c);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (!c || epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
    free(c);
    close(fd);
    return;
  }
  c->fd = fd;
  c->len = 0;
  c->buf[0] = 0;
}

static void *run_loop(void *unused) {
  (void)unused;
  int epoll = epoll_create1(0);
  /* NULL data is the listener; EPOLLEXCLUSIVE wakes one loop per new connection. */
  struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL};
  if (epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev) != 0) {
    perror("bench_http_floor: epoll");
    exit(1);
  }
  struct epoll_event ready[64];
  for (;;) {
    int n = epoll_wait(epoll, ready, 64, -1);
    if (n < 0 && errno != EINTR) {
      perror("bench_http_floor: epoll_wait");
      exit(1);
    }
    for (int i = 0; i < n; i++) {
      conn *c = ready[i].data.ptr;
      if (!c) {
        accept_one(epoll);
        continue;
      }
      ssize_t got = read(c->fd, c->buf + c->len, MAX_REQUEST - c->len);
      if (got < 0 && errno == EAGAIN) continue;
      if (got > 0) {
        c->len += (size_t)got;
        c->buf[c->len] = 0;
      }
      if (got <= 0 || !serve(c)) {
        close(c->fd); /* closing also leaves the epoll set */
        free(c);
      }
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc != 1) {
    fprintf(stderr, "usage: bench_http_floor\n");
    return 2;
  }
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t addr_len = sizeof addr;
  listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      listen(listener, 1024) != 0 ||
      getsockname(listener, (struct sockaddr *)&addr, &addr_len) != 0) {
    perror("bench_http_floor: listen");
    return 1;
  }
  fprintf(stderr, "bench_http_floor: listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int loops = cpus < 1 ? 1 : cpus > MAX_LOOPS ? MAX_LOOPS : (int)cpus;
  pthread_t thread;
  for (int i = 1; i < loops; i++)
    if (pthread_create(&thread, NULL, run_loop, NULL) != 0) {
      perror("bench_http_floor: thread");
      return 1;
    }
  run_loop(NULL);
}
