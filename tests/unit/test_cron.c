/* Heartbeat cadence: manual, 5-field cron syntax and ranges, the either-day rule, and the
 * 400-day horizon, from fixed clock values. */
#include "support.h"

#include <string.h>

#include "domain/cron.h"
#include "util/status.h"

#define JAN_1_2026 1767225600000LL /* Thursday 2026-01-01T00:00:00Z */

static void test_manual(void **state) {
  assert_true(tg_cadence_manual(NULL));
  assert_true(tg_cadence_manual(""));
  assert_true(tg_cadence_manual("manual"));
  assert_false(tg_cadence_manual("Manual"));
  assert_null(tg_cadence_check("manual", JAN_1_2026));
}

static void test_valid_and_invalid(void **state) {
  static const char *const ok[] = {"* * * * *", "*/15 * * * *", "0 9 * * MON-FRI", "5,10 0-6/2 1 jan *",
                                   "0 0 * * 7", "30 12 15 6 *", "0 0 1/10 * *"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    const char *why = tg_cadence_check(ok[i], JAN_1_2026);
    if (why) fail_msg("refused '%s': %s", ok[i], why);
  }
  static const char *const bad[] = {"* * * *", "* * * * * *", "60 * * * *", "* 24 * * *",
                                    "* * 0 * *", "* * * 13 *", "* * * * 8", "5-1 * * * *",
                                    "*/0 * * * *", "? * * * *", "@daily", "a b c d e", "0 0 31 2 *",
                                    "1,,x * * * *"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (!tg_cadence_check(bad[i], JAN_1_2026)) fail_msg("accepted '%s'", bad[i]);
  char too_long[TG_CADENCE_MAX + 8];
  memset(too_long, '1', sizeof too_long - 1);
  too_long[sizeof too_long - 1] = '\0';
  assert_non_null(tg_cadence_check(too_long, JAN_1_2026));
}

static void test_next(void **state) {
  tg_cron c;
  const char *why;
  int64_t next;
  assert_int_equal(tg_cron_parse("*/15 * * * *", &c, &why), 0);
  assert_int_equal(tg_cron_next(&c, JAN_1_2026, &next), 0);
  assert_int_equal(next, JAN_1_2026 + 15 * 60000);
  /* Monday 09:00: 2026-01-05 is the first Monday. */
  assert_int_equal(tg_cron_parse("0 9 * * MON", &c, &why), 0);
  assert_int_equal(tg_cron_next(&c, JAN_1_2026, &next), 0);
  assert_int_equal(next, JAN_1_2026 + (4 * 24 + 9) * 3600000LL);
  /* Both day fields restricted: either matches (the 3rd, or Friday the 2nd). */
  assert_int_equal(tg_cron_parse("0 0 3 * FRI", &c, &why), 0);
  assert_int_equal(tg_cron_next(&c, JAN_1_2026, &next), 0);
  assert_int_equal(next, JAN_1_2026 + 24 * 3600000LL);
  /* Feb 29 fires only in 2028: beyond 400 days from 2026-01-01. */
  assert_int_equal(tg_cron_parse("0 0 29 2 *", &c, &why), 0);
  assert_int_equal(tg_cron_next(&c, JAN_1_2026, &next), TG_E_NOTFOUND);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_manual),
      cmocka_unit_test(test_valid_and_invalid),
      cmocka_unit_test(test_next),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
