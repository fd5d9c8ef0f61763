#include "util/stop_signals.h"

#include <stddef.h>

void tg_stop_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  struct sigaction hup;
  if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaddset(set, SIGHUP);
}
