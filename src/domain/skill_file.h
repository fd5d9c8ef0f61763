/* A skill file (seed 001, "Skills"): Markdown instructions behind a YAML front matter that
 * names and describes the skill. Pure parsing, no I/O.
 *
 *   ---
 *   name: Release notes
 *   slug: release-notes            optional; derived from name when absent
 *   description: Write release notes from the week's activity.
 *   allowed-tools: [work.activity.list, kb.document.get]   also a comma-separated string;
 *                                                          also spelt allowedTools
 *   examples:                      optional
 *     - input: Notes for this week
 *       output: "## Week 21 ..."
 *   ---
 *   The body: what the agent should do, in Markdown.
 *
 * Keys the format does not know are ignored, so files written for other runtimes (license,
 * version, ...) load unchanged. */
#pragma once
#include <jansson.h>
#include <stddef.h>

/* Bounds, in characters (UTF-8 code points) unless said otherwise. */
#define TG_SKILL_FRONT_MATTER_MAX 65536 /* bytes of YAML */
#define TG_SKILL_SLUG_MAX 63
#define TG_SKILL_NAME_MAX 100
#define TG_SKILL_DESCRIPTION_MAX 1024
#define TG_SKILL_TOOLS_MAX 64
#define TG_SKILL_TOOL_NAME_MAX 128
#define TG_SKILL_EXAMPLES_MAX 20
#define TG_SKILL_EXAMPLE_MAX 10000 /* an example's input, and its output */

/* Parses the len bytes of text into a new object
 *   {"slug", "name", "description", "allowedTools": [names], "examples"?: [{"input",
 *    "output"}], "body"}
 * Returns 0; TG_E_INVAL with *reterr (malloc'd) saying what is wrong and where, in words fit
 * for an operator or a model; TG_E_NOMEM. */
int tg_skill_file_parse(const char *text, size_t len, json_t **ret, char **reterr);
