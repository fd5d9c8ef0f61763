/* JSON Schema 2020-12: compile a schema once, validate many instances against it.
 * Owns: the compiled schema representation, $ref/$dynamicRef resolution across the
 * documents it was given, and the runner of the official test suite.
 * Never touches the network: every document a schema refers to must be given. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct tg_schema tg_schema; /* immutable once compiled; validation is thread-safe */

/* Where schemas that are freed together keep their compiled nodes: one store for many, so
 * that each small schema does not hold a block of its own rounded up (a catalog compiles
 * hundreds at start-up). Compile into a store from one thread at a time; free it after every
 * schema compiled into it. What a failed compile took stays in it until then. */
typedef struct tg_schema_store tg_schema_store;

tg_schema_store *tg_schema_store_new(void); /* NULL without memory */
void tg_schema_store_free(tg_schema_store *store);

typedef struct tg_schema_options {
  /* Optional object mapping an absolute URI to a schema document (borrowed). A $ref to a
   * URI that is neither inside the compiled schema nor here fails compilation. */
  json_t *documents;
  tg_schema_store *store; /* NULL: the schema keeps its nodes itself */
} tg_schema_options;

/* Compiles schema (borrowed; the compiled form keeps its own references). opts may be NULL.
 * Returns 0 and *ret, or a negative TG_E_* with *reterr set to a malloc'd message naming the
 * schema location at fault (the caller frees it). */
int tg_schema_compile(json_t *schema, const tg_schema_options *opts, tg_schema **ret,
                      char **reterr);

void tg_schema_free(tg_schema *schema);

/* Validates instance (borrowed). Returns true when it is valid. When errors is a JSON array,
 * appends at most max_errors objects, one per violation:
 *   {"instancePath": "/a/0", "schemaPath": "/properties/a/items/type",
 *    "keyword": "type", "message": "expected string, got integer"}
 * Both paths are JSON pointers (RFC 6901). errors may be NULL when only the verdict matters. */
bool tg_schema_validate(const tg_schema *schema, json_t *instance, json_t *errors,
                        size_t max_errors);

typedef struct tg_schema_suite_options {
  const char *remotes_dir;     /* served as http://localhost:1234/; NULL: <suite>/../remotes */
  const char *metaschema_dir;  /* the 2020-12 meta-schemas; NULL: <suite>/../../json-schema-2020-12-metaschema */
  const char *exclusions_path; /* NULL: none. Lines "file.json | case description | test description | reason" */
  bool verbose;                /* print every test, not only failures */
} tg_schema_suite_options;

typedef struct tg_schema_suite_result {
  int passed, failed, excluded;
} tg_schema_suite_result;

/* Runs every *.json file of suite_dir (the official JSON-Schema-Test-Suite layout), printing
 * each failure to out and ending with the line "N passed, M failed" (", K skipped" added when
 * exclusions matched). Returns 0 when it ran, negative TG_E_* when it could not read the suite. */
int tg_schema_suite_run(const char *suite_dir, const tg_schema_suite_options *opts, FILE *out,
                        tg_schema_suite_result *ret);
