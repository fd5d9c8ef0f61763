/* A token's last use (core/token_use.c): written when first due, then at most once a minute
 * unless its server stops; a failed write tried again a minute later, one another writer
 * held off at the next; never written over a later one; bounded in memory, with room made
 * again a minute on. */
#include "support.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/principal.h"
#include "core/token_use.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/status.h"

typedef struct fixture {
  tg_test_db *t;
  char hash[TG_TOKEN_HASH_LEN + 1]; /* of the one token in the database */
} fixture;

static void hash_of(const char *token, char hash[TG_TOKEN_HASH_LEN + 1]) {
  assert_int_equal(tg_sha256_hex(token, strlen(token), hash), 0);
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_non_null(f->t = calloc(1, sizeof *f->t));
  f->t->dir = tg_test_tmpdir();
  f->t->db = tg_test_db_open(f->t->dir);
  assert_int_equal(tg_db_migrate(f->t->db, NULL), 0);
  char tenant[TG_UUID_LEN + 1], owner[TG_UUID_LEN + 1];
  assert_int_equal(tg_tenant_create(f->t->db, "w", "owner", tenant, owner), 0);
  hash_of("tg_the_token", f->hash);
  assert_int_equal(tg_db_exec(f->t->db,
                              "INSERT INTO api_tokens (id, principal_id, token_hash, prefix,"
                              " created_at) VALUES ('t1', $1, $2, 'tg_the_tok', '2026-01-01')",
                              json_pack("[ss]", owner, f->hash), NULL),
                   0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  tg_token_uses_test_later_ms = 0;
  tg_test_db_free(f->t);
  free(f);
  return 0;
}

/* The token's last_used_at into out, or "" when none. */
static void last_use(fixture *f, char out[TG_ISO_LEN + 1]) {
  json_t *row = NULL;
  assert_int_equal(tg_db_query_row(f->t->db, "SELECT last_used_at FROM api_tokens WHERE id = 't1'",
                                   NULL, &row),
                   0);
  const char *at = json_string_value(json_object_get(row, "last_used_at"));
  snprintf(out, TG_ISO_LEN + 1, "%s", at ? at : "");
  json_decref(row);
}

static void test_first_use_at_once_then_at_the_stop(void **state) {
  fixture *f = *state;
  tg_token_uses *u = tg_token_uses_new();
  assert_non_null(u);
  char never[TG_ISO_LEN + 1], first[TG_ISO_LEN + 1], same[TG_ISO_LEN + 1], last[TG_ISO_LEN + 1];
  last_use(f, never);
  assert_string_equal(never, "");
  assert_true(tg_token_used(u, f->hash));
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  last_use(f, first);
  assert_int_equal(strlen(first), TG_ISO_LEN);
  usleep(5000);
  assert_false(tg_token_used(u, f->hash)); /* within the minute: not due */
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  last_use(f, same);
  assert_string_equal(same, first);
  assert_int_equal(tg_token_uses_write(u, f->t->db, true), 0); /* the stop writes it */
  last_use(f, last);
  assert_true(strcmp(last, first) > 0);
  tg_token_uses_free(u);
}

static void test_a_failed_write_is_tried_again_a_minute_later(void **state) {
  fixture *f = *state;
  tg_token_uses *u = tg_token_uses_new();
  char at[TG_ISO_LEN + 1];
  assert_true(tg_token_used(u, f->hash));
  tg_db_fail_after(f->t->db, 1);
  assert_true(tg_token_uses_write(u, f->t->db, false) < 0);
  /* Not at once (a locked database would hold every request), but a minute later. */
  assert_false(tg_token_used(u, f->hash));
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  last_use(f, at);
  assert_string_equal(at, "");
  tg_token_uses_test_later_ms = TG_TOKEN_USE_WRITE_MS;
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  last_use(f, at);
  assert_int_equal(strlen(at), TG_ISO_LEN);
  tg_token_uses_free(u);
}

/* A write put off by another writer's lock (a call, another process) is no fault: the use
 * is due again at once, and the next write records it. */
static void test_a_write_another_writer_held_off_is_tried_at_the_next(void **state) {
  fixture *f = *state;
  tg_token_uses *u = tg_token_uses_new();
  char at[TG_ISO_LEN + 1];
  tg_db *other = tg_test_db_open(f->t->dir);
  assert_int_equal(tg_db_begin(other), 0);
  assert_true(tg_token_used(u, f->hash));
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), TG_E_BUSY);
  assert_true(tg_token_used(u, f->hash));
  assert_int_equal(tg_db_rollback(other), 0);
  tg_db_close(other);
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  last_use(f, at);
  assert_int_equal(strlen(at), TG_ISO_LEN);
  tg_token_uses_free(u);
}

/* A use written elsewhere (another server, a CLI call) later than the one held stands. */
static void test_a_later_use_stands(void **state) {
  fixture *f = *state;
  tg_token_uses *u = tg_token_uses_new();
  char held[TG_ISO_LEN + 1], at[TG_ISO_LEN + 1];
  assert_true(tg_token_used(u, f->hash));
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  usleep(2000);
  assert_false(tg_token_used(u, f->hash)); /* held, not written within the minute */
  usleep(2000);
  assert_int_equal(tg_token_use_write(f->t->db, "tg_the_token"), 0);
  last_use(f, held);
  assert_int_equal(tg_token_uses_write(u, f->t->db, true), 0); /* the stop: the held one */
  last_use(f, at);
  assert_string_equal(at, held);
  tg_token_uses_free(u);
}

/* The table holds TG_TOKEN_USES_MAX tokens; one found full at a write (tokens in steady use
 * never leave it) is written whole and emptied, so the tokens past it are recorded next. */
static void test_bounded(void **state) {
  fixture *f = *state;
  tg_token_uses *u = tg_token_uses_new();
  assert_true(tg_token_used(u, f->hash));
  char hash[TG_TOKEN_HASH_LEN + 1], token[32], at[TG_ISO_LEN + 1];
  for (int i = 1; i < TG_TOKEN_USES_MAX; i++) {
    snprintf(token, sizeof token, "tg_other_%d", i);
    hash_of(token, hash);
    assert_true(tg_token_used(u, hash));
  }
  hash_of("tg_one_too_many", hash);
  assert_false(tg_token_used(u, hash)); /* not remembered, and logged */
  assert_int_equal(tg_token_uses_write(u, f->t->db, false), 0);
  last_use(f, at);
  assert_int_equal(strlen(at), TG_ISO_LEN);
  assert_true(tg_token_used(u, hash));
  assert_true(tg_token_used(u, f->hash)); /* forgotten: due again, as a new one */
  tg_token_uses_free(u);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_first_use_at_once_then_at_the_stop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_failed_write_is_tried_again_a_minute_later, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_write_another_writer_held_off_is_tried_at_the_next,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_later_use_stands, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bounded, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
