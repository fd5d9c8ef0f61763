#include "git/libgit2.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "util/log.h"
#include "util/status.h"

/* The library this binary was built against: its ABI is what the pointers' types describe. */
#define LIBGIT2_FILE "libgit2.so." LIBGIT2_SOVERSION

struct tg_libgit2 tg_git2;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

static void load(void) {
  void *h = dlopen(LIBGIT2_FILE, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    tg_log(TG_LOG_ERROR, "git: cannot load %s: %s", LIBGIT2_FILE, dlerror());
    return;
  }
#define TG_LIBGIT2_RESOLVE(f)                                                   \
  if (!(*(void **)&tg_git2.f = dlsym(h, #f))) {                                 \
    tg_log(TG_LOG_ERROR, "git: %s has no %s", LIBGIT2_FILE, #f);                \
    goto unusable;                                                             \
  }
  TG_LIBGIT2_FUNCTIONS(TG_LIBGIT2_RESOLVE)
#undef TG_LIBGIT2_RESOLVE
  /* Once, for the process's life: each thread's error state goes with its thread. A shutdown
   * that brought the count to zero would drop the key of every other thread's state (which
   * then leaks as those threads end), and the next use would build libgit2's globals again. */
  if (tg_git2.git_libgit2_init() < 0) {
    /* Not unloaded: what init set up before it failed (thread keys) may point into it. */
    tg_libgit2_fail("init");
    return;
  }
  loaded = true;
  return;
unusable: /* no pointer into a library that is gone */
  memset(&tg_git2, 0, sizeof tg_git2);
  dlclose(h);
}

int tg_libgit2_init(void) {
  pthread_once(&load_once, load);
  return loaded ? TG_OK : TG_E_IO;
}

int tg_libgit2_fail(const char *what) {
  const git_error *e = tg_git2.git_error_last();
  tg_log(TG_LOG_ERROR, "git: %s: %s", what, e && e->message ? e->message : "unknown error");
  return TG_E_IO;
}
