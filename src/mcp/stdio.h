/* MCP over stdio: newline-delimited JSON-RPC on two file descriptors, one connection, one
 * principal. Logs go to stderr, never to the output stream. */
#pragma once
#include <stdio.h>

#include "mcp/server.h"

/* Serves messages from in until end of file. Returns 0 at EOF, TG_E_IO on a write failure,
 * TG_E_NOMEM. */
int tg_mcp_stdio_serve(const tg_mcp_server *srv, const tg_env *env, const char *principal_id,
                       FILE *in, FILE *out);
