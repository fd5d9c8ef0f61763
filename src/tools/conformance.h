/* The fixtures of the official MCP conformance suite: a tool provider (conformance.json +
 * handlers) and the resources, templates, prompts and completions the suite reads. Only
 * registered when a surface is started with --conformance-fixtures.
 *
 * Handlers that talk back to the client (progress, log messages, sampling, elicitation) do
 * it through cx->client, so they never know the transport. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "core/tool.h"

extern const tg_provider tg_provider_conformance;




/* Resources, templates and prompts of the suite. New references; NULL when out of memory. */
json_t *tg_conformance_resources(void);
json_t *tg_conformance_resource_templates(void);
json_t *tg_conformance_prompts(void);
/* contents array of uri; TG_E_NOTFOUND when there is no such resource. */
int tg_conformance_resource_read(const char *uri, json_t **ret_contents);
/* The GetPromptResult ({messages}) of prompt name with args (may be NULL), or an
 * InputRequiredResult asking for what input_responses (may be NULL) lacks. TG_E_NOTFOUND
 * for an unknown prompt, TG_E_INVAL with *ret_why (static) for missing arguments. */
int tg_conformance_prompt_get(const char *name, json_t *args, json_t *input_responses,
                              json_t **ret_result, const char **ret_why);
/* Completion values (a new array) for value, what is typed so far of argument of ref, a
 * prompt ({type: "ref/prompt", name}) or a resource template ({type: "ref/resource", uri}).
 * TG_E_NOTFOUND when ref names none of the fixtures', TG_E_INVAL when it takes no such
 * argument. */
int tg_conformance_complete(json_t *ref, const char *argument, const char *value, json_t **ret);
