/* domain/task_state: every (from, to) pair of the seven statuses against the table of
 * research/ever-works-semantics.md §1.2, written out again here by hand. */
#include "support.h"

#include <string.h>

#include "domain/task_state.h"

/* "-" illegal; otherwise "+" followed by the marks: B blocker gate, A approver gate,
 * D dispatch. Rows are from, columns to, both in the order backlog, todo, in_progress,
 * in_review, blocked, done, cancelled. */
static const char *const expected[7][7] = {
    /* backlog     */ {"-", "+", "-", "-", "-", "-", "+"},
    /* todo        */ {"-", "-", "+BD", "-", "+", "-", "+"},
    /* in_progress */ {"-", "-", "-", "+", "+", "+BA", "+"},
    /* in_review   */ {"-", "-", "+BD", "-", "+", "+BA", "+"},
    /* blocked     */ {"-", "+", "+BD", "-", "-", "-", "+"},
    /* done        */ {"-", "-", "+BD", "-", "-", "-", "-"},
    /* cancelled   */ {"-", "-", "-", "-", "-", "-", "-"},
};

static const char *const names[7] = {"backlog", "todo",  "in_progress", "in_review",
                                     "blocked", "done", "cancelled"};

static unsigned marks_of(const char *cell) {
  if (strcmp(cell, "-") == 0) return 0;
  unsigned bits = TG_EDGE_LEGAL;
  if (strchr(cell, 'B')) bits |= TG_EDGE_BLOCKERS;
  if (strchr(cell, 'A')) bits |= TG_EDGE_APPROVERS;
  if (strchr(cell, 'D')) bits |= TG_EDGE_DISPATCH;
  return bits;
}

static void test_every_pair(void **state) {
  int legal = 0;
  for (unsigned from = 0; from < 7; from++) {
    unsigned targets = 0;
    for (unsigned to = 0; to < 7; to++) {
      unsigned want = marks_of(expected[from][to]);
      unsigned got = tg_task_edge((tg_task_status)from, (tg_task_status)to);
      if (got != want)
        fail_msg("%s -> %s: edge bits %u, expected %u (%s)", names[from], names[to], got, want,
                 expected[from][to]);
      assert_int_equal(tg_task_can_transition((tg_task_status)from, (tg_task_status)to), want != 0);
      if (want) {
        targets |= 1u << to;
        legal++;
      }
    }
    assert_int_equal(tg_task_targets((tg_task_status)from), targets);
  }
  assert_int_equal(legal, 17);
}

static void test_no_status_moves_to_itself(void **state) {
  for (unsigned s = 0; s < 7; s++) assert_false(tg_task_can_transition((tg_task_status)s, (tg_task_status)s));
}

static void test_names_round_trip(void **state) {
  for (unsigned s = 0; s < 7; s++) {
    assert_string_equal(tg_task_status_name((tg_task_status)s), names[s]);
    tg_task_status parsed;
    assert_true(tg_task_status_parse(names[s], &parsed));
    assert_int_equal(parsed, s);
  }
  tg_task_status parsed = TG_TASK_TODO;
  assert_false(tg_task_status_parse("finished", &parsed));
  assert_false(tg_task_status_parse(NULL, &parsed));
  assert_int_equal(parsed, TG_TASK_TODO);
  assert_null(tg_task_status_name((tg_task_status)7));
  assert_int_equal(tg_task_edge((tg_task_status)7, TG_TASK_TODO), 0);
  assert_int_equal(tg_task_edge(TG_TASK_TODO, (tg_task_status)-1), 0);
}

static void test_open_statuses(void **state) {
  for (unsigned s = 0; s < 7; s++)
    assert_int_equal(tg_task_status_open((tg_task_status)s), s != TG_TASK_DONE && s != TG_TASK_CANCELLED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_pair),
      cmocka_unit_test(test_no_status_moves_to_itself),
      cmocka_unit_test(test_names_round_trip),
      cmocka_unit_test(test_open_statuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
