/* util/process_tag: telling a process gone (killed, exited, from before a reboot) from one
 * alive or out of sight, with real child processes. */
#define _GNU_SOURCE
#include "support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/process_tag.h"

typedef struct tag_parts {
  char machine[64], boot[64];
  unsigned long long pid_ns, time_ns, start;
  int pid;
} tag_parts;

static tag_parts parts_of(const char *tag) {
  tag_parts p;
  assert_int_equal(sscanf(tag, "m=%63s b=%63s ns=%llu tns=%llu pid=%d t=%llu", p.machine,
                          p.boot, &p.pid_ns, &p.time_ns, &p.pid, &p.start),
                   6);
  return p;
}

static void format(const tag_parts *p, char out[TG_PROCESS_TAG_LEN]) {
  snprintf(out, TG_PROCESS_TAG_LEN, "m=%s b=%s ns=%llu tns=%llu pid=%d t=%llu", p->machine,
           p->boot, p->pid_ns, p->time_ns, p->pid, p->start);
}

/* Field 22 (the start time) of /proc/PID/stat, counted from the end of field 2, the name in
 * parentheses, without the code under test. */
static unsigned long long start_of(pid_t pid) {
  char path[32], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *rest = strrchr(buf, ')') + 2, *save = NULL, *field = strtok_r(rest, " ", &save);
  for (int i = 3; i < 22; i++) field = strtok_r(NULL, " ", &save);
  assert_non_null(field);
  return strtoull(field, NULL, 10);
}

/* A child, named with parentheses and spaces as a command may be, that sends its tag and
 * waits for its pipe to close, or for a signal. */
static pid_t child_with_tag(char tag[TG_PROCESS_TAG_LEN], int *hold_fd) {
  int to_parent[2], to_child[2];
  assert_int_equal(pipe(to_parent), 0);
  assert_int_equal(pipe(to_child), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(to_parent[0]);
    close(to_child[1]); /* else its own write end keeps its read from ending */
    prctl(PR_SET_NAME, "a) b (c) 1 2");
    char mine[TG_PROCESS_TAG_LEN] = "";
    tg_process_tag(mine);
    ssize_t w = write(to_parent[1], mine, sizeof mine);
    char c;
    ssize_t r = read(to_child[0], &c, 1); /* until the parent lets go */
    _exit(w == (ssize_t)sizeof mine && r == 0 ? 0 : 1);
  }
  close(to_parent[1]);
  close(to_child[0]);
  assert_int_equal(read(to_parent[0], tag, TG_PROCESS_TAG_LEN), TG_PROCESS_TAG_LEN);
  close(to_parent[0]);
  *hold_fd = to_child[1];
  return pid;
}

static void test_this_process_is_alive(void **state) {
  char tag[TG_PROCESS_TAG_LEN];
  assert_int_equal(tg_process_tag(tag), 0);
  tag_parts me = parts_of(tag);
  assert_int_equal(me.pid, getpid());
  assert_false(tg_process_tag_gone(tag));
}

static void test_a_child_is_alive_then_gone(void **state) {
  char tag[TG_PROCESS_TAG_LEN];
  int hold;
  pid_t pid = child_with_tag(tag, &hold);
  assert_int_equal(parts_of(tag).pid, pid);
  assert_true(parts_of(tag).start == start_of(pid));
  assert_false(tg_process_tag_gone(tag));
  close(hold); /* it exits, not yet waited for: a zombie */
  for (int i = 0; i < 500 && !tg_process_tag_gone(tag); i++) usleep(10000);
  assert_true(tg_process_tag_gone(tag));
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_true(tg_process_tag_gone(tag)); /* no process on the pid */

  pid = child_with_tag(tag, &hold);
  assert_int_equal(kill(pid, SIGKILL), 0);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  close(hold);
  assert_true(tg_process_tag_gone(tag));
}

static void test_another_process_on_the_pid_is_not_it(void **state) {
  char tag[TG_PROCESS_TAG_LEN];
  assert_int_equal(tg_process_tag(tag), 0);
  tag_parts me = parts_of(tag);
  me.start += 1; /* the pid's process started at another time: the pid was given again */
  format(&me, tag);
  assert_true(tg_process_tag_gone(tag));
}

static void test_other_boots_machines_and_namespaces(void **state) {
  char own[TG_PROCESS_TAG_LEN], tag[TG_PROCESS_TAG_LEN];
  int hold;
  pid_t pid = child_with_tag(own, &hold);
  close(hold);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  tag_parts dead = parts_of(own);

  /* This machine before its last boot: gone, whatever its pid. */
  tag_parts p = dead;
  snprintf(p.boot, sizeof p.boot, "00000000-0000-4000-8000-000000000000");
  format(&p, tag);
  assert_int_equal(tg_process_tag_gone(tag), strcmp(dead.machine, "-") != 0);
  /* Another machine's (or one with no id): nothing here tells. */
  snprintf(p.machine, sizeof p.machine, "0123456789abcdef0123456789abcdef");
  format(&p, tag);
  assert_false(tg_process_tag_gone(tag));
  snprintf(p.machine, sizeof p.machine, "-");
  format(&p, tag);
  assert_false(tg_process_tag_gone(tag));
  /* Another pid namespace: its pid is not one of ours, though ours is gone. Another time
   * namespace: its start time is not counted as we read it. */
  p = dead;
  p.pid_ns += 1;
  format(&p, tag);
  assert_false(tg_process_tag_gone(tag));
  p = dead;
  p.time_ns += 1;
  format(&p, tag);
  assert_false(tg_process_tag_gone(tag));
  format(&dead, tag);
  assert_true(tg_process_tag_gone(tag));
}

static void test_what_is_no_tag_is_not_gone(void **state) {
  assert_false(tg_process_tag_gone(NULL));
  assert_false(tg_process_tag_gone(""));
  assert_false(tg_process_tag_gone("pid=1"));
  char tag[TG_PROCESS_TAG_LEN];
  assert_int_equal(tg_process_tag(tag), 0);
  tag_parts me = parts_of(tag);
  me.pid = 0;
  format(&me, tag);
  assert_false(tg_process_tag_gone(tag));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_this_process_is_alive),
      cmocka_unit_test(test_a_child_is_alive_then_gone),
      cmocka_unit_test(test_another_process_on_the_pid_is_not_it),
      cmocka_unit_test(test_other_boots_machines_and_namespaces),
      cmocka_unit_test(test_what_is_no_tag_is_not_gone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
