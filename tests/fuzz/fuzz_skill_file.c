/* Fuzzes the skill-file parser: any bytes either parse into a skill within every bound or
 * are refused with a message; never a crash or a leak. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "domain/skill_file.h"

#define MAX_INPUT (TG_SKILL_FRONT_MATTER_MAX + 4096)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT) return 0;
  json_t *skill = NULL;
  char *why = NULL;
  int r = tg_skill_file_parse((const char *)data, size, &skill, &why);
  if ((r == 0) != (skill != NULL) || (r == 0 && why) || (r == -5 && !why) || (r != 0 && r != -5)) abort();
  if (skill) {
    const char *slug = json_string_value(json_object_get(skill, "slug"));
    if (!slug || !*slug || strlen(slug) > TG_SKILL_SLUG_MAX) abort();
    if (json_array_size(json_object_get(skill, "allowedTools")) > TG_SKILL_TOOLS_MAX) abort();
    if (json_array_size(json_object_get(skill, "examples")) > TG_SKILL_EXAMPLES_MAX) abort();
    if (!json_string_value(json_object_get(skill, "body"))) abort();
  }
  json_decref(skill);
  free(why);
  return 0;
}
