/* Fuzzes schema compilation and validation. The input is "schema NUL instance"; without a NUL
 * byte it serves as both. Besides crashes and leaks it checks that collecting errors never
 * changes the verdict, and that errors are reported exactly when the instance is invalid. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/schema.h"

#define MAX_INPUT 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  const uint8_t *nul = memchr(data, 0, size);
  size_t schema_len = nul ? (size_t)(nul - data) : size;
  const char *instance_text = (const char *)(nul ? nul + 1 : data);
  size_t instance_len = nul ? size - schema_len - 1 : size;

  json_t *schema = json_loadb((const char *)data, schema_len, JSON_DECODE_ANY, NULL);
  json_t *instance =
      json_loadb(instance_text, instance_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  tg_schema *compiled = NULL;
  char *err = NULL;
  if (schema && tg_schema_compile(schema, NULL, &compiled, &err) == 0 && instance) {
    json_t *errors = json_array();
    bool verdict = tg_schema_validate(compiled, instance, NULL, 0);
    bool reported = tg_schema_validate(compiled, instance, errors, 16);
    if (errors && (verdict != reported || verdict != (json_array_size(errors) == 0))) abort();
    json_decref(errors);
  }
  free(err);
  tg_schema_free(compiled);
  json_decref(schema);
  json_decref(instance);
  return 0;
}
