/* The secret-scan rules: each rule has a positive and a negative case; a hit names the rule
 * and the line. Tokens are split across string literals so that this file itself holds none. */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domain/secret_scan.h"

typedef struct example {
  const char *rule, *positive, *negative;
} example;

static const example examples[] = {
    {"toolgate_token", "my key: t" "g_0123456789abcdefghijABCDEFGHIJ-_0123456789X",
     "tg_0123456789abcdefghijABCDEFGHIJ-_0123456789XY is one too long"},
    {"generic", "auth: sk-" "abc123def456ghi", "a key-value store is simple"},
    {"aws_access_key", "id AK" "IAABCDEFGHIJKLMNOP here", "AKIA is a prefix: AKIAshort"},
    {"github_pat_classic", "gh" "p_0123456789abcdefghijABCDEFGHIJ012345", "ghp_short123"},
    {"github_oauth", "gh" "o_0123456789abcdefghijABCDEFGHIJ012345", "gho_tooshort"},
    {"github_app_token", "gh" "s_0123456789abcdefghijABCDEFGHIJ012345", "ghs_x"},
    {"github_fine_grained_pat", "github" "_pat_11ABCDEFG0123456789_abcdefghijklmnop",
     "github_pat_ short"},
    {"gitlab_pat", "glp" "at-abcdefghij0123456789", "glpat-short"},
    {"slack_token", "xo" "xb-123456789012-abcdef", "xoxb-short"},
    {"slack_webhook", "https://hooks.slack.com/services/" "T000AAAA/B000BBBB/abcdefghijklmnop1234",
     "https://hooks.slack.com/services/"},
    {"discord_webhook",
     "https://discord.com/api/webhooks/" "123456789012345678/"
     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd",
     "https://discord.com/api/webhooks/123"},
    {"telegram_bot_token", "1234567" "89:AAabcdefghijklmnopqrstuvwxyz0123456", "12345:AAshort"},
    {"generic_pat", "pa" "t_abcdefghijklmnopqrstuvwxyz012345", "pat_short"},
    {"pem_private_key", "-----BEGIN RSA " "PRIVATE KEY-----\nMIIB", "-----BEGIN PUBLIC KEY-----"},
    {"google_api_key", "AI" "zaSyA0123456789abcdefghijklmnopqrstuv", "AIza too short"},
    {"stripe_secret_key", "sk" "_live_0123456789abcdefXYZ", "sk_live_short"},
    {"npm_token", "np" "m_0123456789abcdefghijABCDEFGHIJ012345", "npm_install"},
    {"huggingface_token", "h" "f_abcdefghijklmnopqrstuvwxyz0123", "hf_hub"},
    {"jwt", "ey" "JhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "eyJ.not.ajwt"},
    {"twilio_api_key", "S" "K0123456789abcdef0123456789abcdef", "SK12 is a model number"},
    {"connection_string_password", "postgres://app:" "s3cr3tPw@db.internal/app",
     "postgres://app:${DB_PASSWORD}@db.internal/app"},
    {"high_entropy_assignment", "api_key = \"q8Zr2LmX9vT4kP7wN3sB6yD1\"",
     "password = \"aaaaaaaaaaaaaaaaaaaa\""},
};

static size_t rule_index(const char *name) {
  for (size_t i = 0; i < tg_secret_rule_count(); i++)
    if (strcmp(tg_secret_rule_name(i), name) == 0) return i;
  fail_msg("no rule %s", name);
  return 0;
}

static void test_every_rule_has_cases(void **state) {
  size_t n = tg_secret_rule_count();
  assert_true(n > 15);
  for (size_t i = 0; i < n; i++) {
    bool found = false;
    for (size_t k = 0; k < sizeof examples / sizeof examples[0]; k++)
      if (strcmp(examples[k].rule, tg_secret_rule_name(i)) == 0) found = true;
    if (!found) fail_msg("rule %s has no test case", tg_secret_rule_name(i));
  }
}

static void test_positive_and_negative(void **state) {
  for (size_t k = 0; k < sizeof examples / sizeof examples[0]; k++) {
    const example *e = &examples[k];
    size_t i = rule_index(e->rule);
    bool yes = false;
    assert_int_equal(tg_secret_rule_matches(i, e->positive, strlen(e->positive), &yes), 0);
    if (!yes) fail_msg("rule %s missed its positive case", e->rule);
    assert_int_equal(tg_secret_rule_matches(i, e->negative, strlen(e->negative), &yes), 0);
    if (yes) fail_msg("rule %s matched its negative case", e->rule);
    tg_secret_hit hit;
    assert_int_equal(tg_secret_scan(e->positive, strlen(e->positive), &hit), 1);
  }
}

static void test_hit_names_rule_and_line(void **state) {
  const char text[] = "# Soul\nline two\ntoken: gl" "pat-abcdefghij0123456789\n";
  tg_secret_hit hit;
  assert_int_equal(tg_secret_scan(text, strlen(text), &hit), 1);
  assert_string_equal(hit.rule, "gitlab_pat");
  assert_int_equal(hit.line, 3);
  const char clean[] = "# Soul\nI help with the website. Bearer tokens go in the vault.\n";
  assert_int_equal(tg_secret_scan(clean, strlen(clean), &hit), 0);
}

static void test_disguises_are_seen_through(void **state) {
  /* A zero-width space inside the token, and a full-width prefix. */
  const char split[] = "gh\xe2\x80\x8bp_0123456789abcdefghijABCDEFGHIJ012345";
  const char wide[] = "\xef\xbd\x87hp_0123456789abcdefghijABCDEFGHIJ012345";
  tg_secret_hit hit;
  assert_int_equal(tg_secret_scan(split, strlen(split), &hit), 1);
  assert_string_equal(hit.rule, "github_pat_classic");
  assert_int_equal(tg_secret_scan(wide, strlen(wide), &hit), 1);
  assert_string_equal(hit.rule, "github_pat_classic");
}

/* A 4 MiB run of one letter stays within the backtracking limits (it used to fail the
 * scan), and a credential after it is still found. */
static void test_long_texts_scan(void **state) {
  (void)state;
  size_t n = 4u << 20;
  char *text = malloc(n + 64);
  assert_non_null(text);
  memset(text, 'z', n);
  text[n] = '\0';
  tg_secret_hit hit;
  assert_int_equal(tg_secret_scan(text, n, &hit), 0);
  static const char tail[] = "\napi_token = \"Zq8vR2mT7xL4pW9sK3nB6cY1\"";
  memcpy(text + n, tail, sizeof tail);
  assert_int_equal(tg_secret_scan(text, n + sizeof tail - 1, &hit), 1);
  assert_string_equal(hit.rule, "high_entropy_assignment");
  assert_int_equal(hit.line, 2);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_rule_has_cases),
      cmocka_unit_test(test_positive_and_negative),
      cmocka_unit_test(test_hit_names_rule_and_line),
      cmocka_unit_test(test_disguises_are_seen_through),
      cmocka_unit_test(test_long_texts_scan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
