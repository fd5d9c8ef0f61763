/* The secret scan as the tools that store agent-written text apply it (src/domain/
 * secret_scan.h): a hit refuses the call with validation_failed naming the field, the rule
 * and the line, never the text. */
#pragma once
#include <stddef.h>

#include "core/call.h"

/* 0 when text (named field in the refusal) is clean; else the refusal or a TG_E_* failure. */
int tg_refuse_secret(tg_call_ctx *cx, const char *field, const char *text, size_t len);
