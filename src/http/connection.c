/* One client connection: its socket, its record (peer) and by when its client must have
 * sent or taken what it must. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <poll.h>

/* A request must arrive whole within this many idle timeouts of its connection's start or
 * previous answer, and a JSON answer (or what is left of a stream that ended) be taken whole
 * within as many more as it holds TAKING_BYTES_PER_TIMEOUT (70 KB a second with the default
 * timeout): a client that sends or reads a byte now and then is never idle, and would hold
 * its connection slot for as long as it likes. An answer the socket's buffers take whole is
 * done with at once. */
#define SLOW_TIMEOUTS 2
#define TAKING_BYTES_PER_TIMEOUT (2u * 1024u * 1024u)

/* Whether the client closed the connection on socket fd (its own thread reads nothing
 * from it while an answer is being waited for). */
bool http_client_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* http_client_gone for a request's tg_mcp_request (arg: its socket's descriptor). */
bool http_connection_gone(void *arg) { return http_client_gone(*(const int *)arg); }

int http_connection_fd(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info ? info->connect_fd : -1;
}

peer *http_peer_of(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return info ? info->socket_context : NULL;
}

/* The database connection of p's requests (NULL: p is none), taken on their own thread at the
 * first that needs one: a spare one a closed connection left, else a new one. Opening may
 * wait on a busy database, which must not hold up the thread accepting every connection. */
tg_db *http_peer_db(peer *p) {
  if (!p) return NULL;
  server *s = p->srv;
  if (!p->db) {
    pthread_mutex_lock(&s->peers_lock);
    if (s->n_spare_dbs) p->db = s->spare_dbs[--s->n_spare_dbs];
    pthread_mutex_unlock(&s->peers_lock);
  }
  return http_thread_db(s, &p->db);
}

unsigned http_idle_timeout_s(const server *s) {
  return s->cfg->idle_timeout_s ? s->cfg->idle_timeout_s : (unsigned)TG_HTTP_IDLE_TIMEOUT_S;
}

/* How long a client has to send a request whole, or to take an answer of bytes whole (ms). */
int64_t http_slow_limit_ms(const server *s, size_t bytes) {
  int64_t timeout_ms = 1000LL * http_idle_timeout_s(s);
  return timeout_ms * SLOW_TIMEOUTS + timeout_ms * (int64_t)bytes / TAKING_BYTES_PER_TIMEOUT;
}

/* Gives conn's client until due_by (monotonic ms; 0: no end) to send or take what it must. */
void http_set_due_by(struct MHD_Connection *conn, int64_t due_by) {
  peer *p = http_peer_of(conn);
  if (p) atomic_store(&p->due_by, due_by);
}
