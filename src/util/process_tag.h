/* A process named in words that outlive it: the machine, its boot, the pid and time
 * namespaces, the pid and the pid's start time. A run a server holds (its stdio session's, or
 * an HTTP session's) is tagged with the server, so that the next server on the machine can
 * tell a holder gone (killed, crashed, or from before a reboot) from one alive, whose run
 * must stay open. */
#pragma once
#include <stdbool.h>

#define TG_PROCESS_TAG_LEN 256

/* This process's tag into out. Returns 0, or TG_E_IO when /proc cannot tell (unmounted, or
 * mounted from another pid namespace). */
int tg_process_tag(char out[TG_PROCESS_TAG_LEN]);

/* The tag of a server that holds runs into out, or "" when /proc cannot tell, which is then
 * logged as a warning of who (the server, "serve" or "mcp"): the runs it holds cannot be told
 * from a live server's when it is killed, and stay running until an operator ends them. */
void tg_process_tag_of_holder(char out[TG_PROCESS_TAG_LEN], const char *who);

/* True only when the process tag names is surely gone: on this machine before its last boot,
 * or on this boot and in this pid namespace with no such process left (none, another process
 * on the pid since, or a zombie). False for one alive, on another machine or namespace, and
 * for what is no tag. Machines that share a machine id (a cloned image) must not share a
 * database: each would take the other's processes for its own from before its boot. */
bool tg_process_tag_gone(const char *tag);
