/* The signals that stop a server gracefully. */
#pragma once
#include <signal.h>

/* Fills set with SIGINT, SIGTERM and SIGHUP (its terminal closing), but SIGHUP when the
 * process ignores it: started under nohup, it was asked to outlive its terminal, and a
 * blocked signal waited for is delivered even when ignored. */
void tg_stop_signals(sigset_t *set);
