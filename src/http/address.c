/* Where the server listens and which names reach it: the --listen address, the URL it
 * calls its own, and the Host and Origin checks against DNS rebinding. */

#define _GNU_SOURCE
#include "http/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/log.h"
#include "util/status.h"

static bool loopback_host(const char *host, size_t len) {
  static const char *const names[] = {"localhost", "127.0.0.1", "[::1]", "::1"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i]) == len && strncasecmp(host, names[i], len) == 0) return true;
  return false;
}

/* What follows a host name: nothing, or ":" and a port (1 to 5 digits, at most 65535).
 * Anything else (a path, "@", a second name) makes the whole a name this check does not
 * know. */
static bool port_ok(const char *rest) {
  if (!*rest) return true;
  if (*rest++ != ':') return false;
  size_t digits = strspn(rest, "0123456789");
  return digits >= 1 && digits <= 5 && !rest[digits] && strtoul(rest, NULL, 10) <= 65535;
}

/* Host "name[:port]" (a Host header, or what follows an Origin's scheme) names this machine:
 * one of its usual loopback names, or the address s listens on. */
bool http_host_ok(const server *s, const char *host) {
  if (!host) return true;
  const char *end = host[0] == '[' ? strchr(host, ']') : strchr(host, ':');
  size_t len = !end ? strlen(host) : (size_t)(end - host) + (host[0] == '[');
  bool own = s->own_host[0] && len == strlen(s->own_host) &&
             strncasecmp(host, s->own_host, len) == 0;
  return (loopback_host(host, len) || own) && port_ok(host + len);
}

/* Origin "scheme://name[:port]" names this machine. */
bool http_origin_ok(const server *s, const char *origin) {
  if (!origin) return true;
  const char *p = strstr(origin, "://");
  if (!p) return false;
  size_t scheme = (size_t)(p - origin);
  if (!(scheme == 4 && strncmp(origin, "http", 4) == 0) &&
      !(scheme == 5 && strncmp(origin, "https", 5) == 0))
    return false;
  return http_host_ok(s, p + 3);
}

/* listen as HOST:PORT (HOST in brackets for IPv6; PORT 0 lets the system pick): its address
 * and whether it is a loopback one. TG_E_INVAL, logged with the reason, when it is not one;
 * TG_E_IO when its host is no address and its name could not be resolved. */
int http_parse_listen(const char *listen, struct sockaddr_storage *addr, bool *loopback) {
  const char *colon = strrchr(listen, ':');
  if (!colon || colon == listen || strlen(listen) > 300) {
    tg_log(TG_LOG_ERROR, "serve: cannot use --listen %s: give HOST:PORT", listen);
    return TG_E_INVAL;
  }
  /* getaddrinfo would take 99999 as 99999 mod 65536: the port is read here. */
  char *end = NULL;
  errno = 0;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (!isdigit((unsigned char)colon[1]) || *end || errno || port > 65535) {
    tg_log(TG_LOG_ERROR, "serve: cannot use --listen %s: the port must be a number from 0 to "
           "65535", listen);
    return TG_E_INVAL;
  }
  char host[301];
  size_t hlen = (size_t)(colon - listen);
  if (listen[0] == '[' && listen[hlen - 1] == ']')
    snprintf(host, sizeof host, "%.*s", (int)hlen - 2, listen + 1);
  else snprintf(host, sizeof host, "%.*s", (int)hlen, listen);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_PASSIVE}, *res = NULL;
  int e = getaddrinfo(host, colon + 1, &hints, &res);
  if (e != 0 || !res) { /* a name not found, or no answer: not told apart here */
    tg_log(TG_LOG_ERROR, "serve: cannot use --listen %s: %s", listen,
           e ? gai_strerror(e) : "no address");
    return TG_E_IO;
  }
  memcpy(addr, res->ai_addr, res->ai_addrlen);
  if (res->ai_family == AF_INET)
    *loopback = (ntohl(((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  else
    *loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr);
  freeaddrinfo(res);
  return TG_OK;
}

/* A socket bound to addr and listening; when addr's port is 0, the system picks it and addr
 * says which. -1 (logged) when there is none. */
int http_listen_on(const char *listen_arg, struct sockaddr_storage *addr) {
  socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in);
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int on = 1;
  /* [::] means IPv6 alone, as libmicrohttpd's own sockets do: 0.0.0.0 is a listener apart. */
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) < 0 ||
      (addr->ss_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) < 0) ||
      bind(fd, (struct sockaddr *)addr, len) < 0 || listen(fd, SOMAXCONN) < 0 ||
      getsockname(fd, (struct sockaddr *)addr, &len) < 0) {
    int why = errno;
    tg_log(TG_LOG_ERROR, "serve: cannot listen on %s: %s%s", listen_arg, strerror(why),
           why == EADDRINUSE ? " (another server has it: give another with --listen HOST:PORT)"
                             : "");
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

unsigned http_port_of(const struct sockaddr_storage *addr) {
  return ntohs(addr->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)addr)->sin6_port
                                           : ((const struct sockaddr_in *)addr)->sin_port);
}

/* Whether descriptors a and b are open on one file: b was not closed (and its number taken
 * again by another) since it was made a copy of a. */
bool http_same_file(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

static bool wildcard(const struct sockaddr_storage *addr) {
  return addr->ss_family == AF_INET6
             ? IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr)
             : ((const struct sockaddr_in *)addr)->sin_addr.s_addr == htonl(INADDR_ANY);
}

/* The address addr as numbers, an IPv6 one in brackets, into out. */
void http_numeric_host(const struct sockaddr_storage *addr, char out[INET6_ADDRSTRLEN + 3]) {
  char text[INET6_ADDRSTRLEN] = "";
  bool v6 = addr->ss_family == AF_INET6;
  inet_ntop(addr->ss_family,
            v6 ? (const void *)&((const struct sockaddr_in6 *)addr)->sin6_addr
               : (const void *)&((const struct sockaddr_in *)addr)->sin_addr,
            text, sizeof text);
  snprintf(out, INET6_ADDRSTRLEN + 3, v6 ? "[%s]" : "%s", text);
}

/* How people reach this server, for links, into *url: cfg's public_url, else
 * http://HOST:PORT with the host of --listen (this machine's name for a wildcard address; its
 * address as numbers for a loopback one named otherwise than usual, the only other name its
 * Host check takes) and the port it listens on, both from addr, the address it listens on.
 * Returns TG_OK, TG_E_NOMEM, or TG_E_IO (logged) when the machine's name cannot be read. */
int http_own_url(const server *s, const struct sockaddr_storage *addr, char **url) {
  const tg_http_config *cfg = s->cfg;
  *url = NULL;
  if (cfg->public_url && *cfg->public_url)
    return (*url = strdup(cfg->public_url)) ? TG_OK : TG_E_NOMEM;
  size_t hlen = (size_t)(strrchr(cfg->listen, ':') - cfg->listen);
  char host[256];
  if (wildcard(addr)) {
    if (gethostname(host, sizeof host) < 0) {
      tg_log(TG_LOG_ERROR, "serve: this machine's name, for the server's own URL, cannot be "
             "read: %s (TOOLGATE_PUBLIC_URL gives the URL instead)", strerror(errno));
      return TG_E_IO;
    }
    host[sizeof host - 1] = '\0';
  } else if (s->loopback && !loopback_host(cfg->listen, hlen)) {
    snprintf(host, sizeof host, "%s", s->own_host);
  } else {
    snprintf(host, sizeof host, "%.*s", (int)hlen, cfg->listen);
  }
  if (asprintf(url, "http://%s:%u", host, http_port_of(addr)) < 0) {
    *url = NULL;
    return TG_E_NOMEM;
  }
  return TG_OK;
}
