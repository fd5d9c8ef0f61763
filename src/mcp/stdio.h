/* MCP over stdio: newline-delimited JSON-RPC on two file descriptors, one connection, one
 * principal. Logs go to stderr, never to the output stream. Requests can be cancelled, and
 * the client hears of changes to its tool and prompt lists: checked after each message and,
 * while the connection is idle, every few seconds. */
#pragma once
#include <stdio.h>

#include "mcp/server.h"

/* Messages read and not served yet, and the bytes they hold decoded (as reckoned: see
 * tg_rpc_msg.held): a client may send many at once, and must not make the server hold
 * gigabytes. Past either, a request is refused at once. */
#define TG_MCP_STDIO_QUEUE_MAX 1024
#define TG_MCP_STDIO_QUEUE_MAX_BYTES (16u * 1024u * 1024u)

/* How long the tasks at work have to end once serving stops, before they are cancelled. */
#define TG_MCP_STDIO_STOP_GRACE_MS (10LL * 1000)

/* Serves messages from in until end of file. in is read, and out written, through its file
 * descriptor, not its stdio buffer, so that an idle connection can wait on in, and a write
 * to a client that reads no more can be given up when told to stop. token: the API token that
 * named principal_id, or NULL; it is looked up again before each message and every few
 * seconds, idle or serving one, and once it is revoked serving stops (TG_E_NOTFOUND; the
 * request being served counts as cancelled and is answered with how it ended, a message that
 * found the token revoked is refused; one the database cannot check is refused, to retry).
 * Then the tasks at work have TG_MCP_STDIO_STOP_GRACE_MS to end (unless the token was
 * revoked): how they end stays readable from another connection. stop_fd (-1: none), once
 * readable (a signal to stop, say), stops serving as the end of input does, but for what was
 * read and not answered yet, which is cancelled and gets no answer (a call fails before it
 * commits), and for the tasks at work, which get no grace (or no more of it); a message a
 * client on a pipe or socket does not take then is cut short, and nothing more is written.
 * Returns 0 at EOF or when told to stop, TG_E_IO on a write failure, TG_E_NOMEM. */
int tg_mcp_stdio_serve(const tg_mcp_server *srv, const tg_env *env, const char *principal_id,
                       const char *token, FILE *in, FILE *out, int stop_fd);
