#include "util/process_tag.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/status.h"

typedef struct process_id {
  char machine[64]; /* "-" when the machine has no id: then no reboot is told */
  char boot[64];
  unsigned long long pid_ns;
  unsigned long long time_ns; /* 0 before Linux 5.6, which has none */
  int pid;
  unsigned long long start; /* clock ticks after boot, as its time namespace counts them */
} process_id;

#define TAG_FORMAT "m=%s b=%s ns=%llu tns=%llu pid=%d t=%llu"
#define TAG_SCAN "m=%63s b=%63s ns=%llu tns=%llu pid=%d t=%llu"

/* The first line of path, without its newline, into out[size]; false when there is none. */
static bool read_line(const char *path, char *out, size_t size) {
  FILE *f = fopen(path, "re");
  if (!f) return false;
  bool ok = fgets(out, (int)size, f) != NULL;
  fclose(f);
  if (!ok) return false;
  out[strcspn(out, "\n")] = '\0';
  return *out != '\0' && !strchr(out, ' ');
}

/* The state letter and start time of the process whose stat file is path (proc(5)). */
static bool read_stat(const char *path, char *state, unsigned long long *start) {
  char buf[1024];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  /* Field 2, the command's name in parentheses, can hold spaces and parentheses itself. */
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return false;
  p += 2; /* field 3, the state */
  *state = *p;
  for (int field = 3; field < 22; field++) { /* to field 22, the start time */
    p = strchr(p, ' ');
    if (!p) return false;
    p++;
  }
  return sscanf(p, "%llu", start) == 1;
}

/* The inode of namespace link path ("pid:[4026531836]"), of kind; false when unreadable. */
static bool namespace_of(const char *path, const char *kind, unsigned long long *ret) {
  char link[64], format[32];
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = '\0';
  snprintf(format, sizeof format, "%s:[%%llu]", kind);
  return sscanf(link, format, ret) == 1;
}

static bool self(process_id *id) {
  char own[16], state;
  id->pid = (int)getpid();
  /* /proc names the pids of the namespace it was mounted from, which need not be ours
   * (unshare --pid without --mount-proc): then it cannot tell of our pids. */
  ssize_t n = readlink("/proc/self", own, sizeof own - 1);
  if (n <= 0) return false;
  own[n] = '\0';
  if (atoi(own) != id->pid) return false;
  if (!read_line("/etc/machine-id", id->machine, sizeof id->machine))
    snprintf(id->machine, sizeof id->machine, "-");
  if (!namespace_of("/proc/self/ns/time", "time", &id->time_ns)) id->time_ns = 0;
  return read_line("/proc/sys/kernel/random/boot_id", id->boot, sizeof id->boot) &&
         namespace_of("/proc/self/ns/pid", "pid", &id->pid_ns) &&
         read_stat("/proc/self/stat", &state, &id->start);
}

int tg_process_tag(char out[TG_PROCESS_TAG_LEN]) {
  process_id id;
  if (!self(&id)) return TG_E_IO;
  int n = snprintf(out, TG_PROCESS_TAG_LEN, TAG_FORMAT, id.machine, id.boot, id.pid_ns,
                   id.time_ns, id.pid, id.start);
  return n > 0 && n < TG_PROCESS_TAG_LEN ? TG_OK : TG_E_IO;
}

void tg_process_tag_of_holder(char out[TG_PROCESS_TAG_LEN], const char *who) {
  if (tg_process_tag(out) == TG_OK) return;
  *out = '\0';
  tg_log(TG_LOG_WARN, "%s: /proc does not tell who this process is: if it is killed, the runs "
         "it holds stay running until an operator ends them (toolgate runs end)", who);
}

bool tg_process_tag_gone(const char *tag) {
  process_id it, me;
  if (!tag || sscanf(tag, TAG_SCAN, it.machine, it.boot, &it.pid_ns, &it.time_ns, &it.pid,
                     &it.start) != 6 || it.pid <= 0 || !self(&me))
    return false;
  if (strcmp(it.boot, me.boot) != 0)
    return strcmp(it.machine, "-") != 0 && strcmp(it.machine, me.machine) == 0;
  if (it.pid_ns != me.pid_ns) return false; /* its pids are not ours to read */
  /* A start time is read shifted by the reader's boot-time offset: only ours compare. */
  if (it.time_ns != me.time_ns) return false;
  if (kill(it.pid, 0) < 0 && errno == ESRCH) return true; /* a pid of another user's is EPERM */
  char path[32], state;
  unsigned long long start;
  snprintf(path, sizeof path, "/proc/%d/stat", it.pid);
  if (!read_stat(path, &state, &start)) return false; /* hidden from us (hidepid): unknown */
  return start != it.start || state == 'Z' || state == 'X';
}
