#include "tools/secrets.h"

#include "domain/secret_scan.h"
#include "util/status.h"

int tg_refuse_secret(tg_call_ctx *cx, const char *field, const char *text, size_t len) {
  tg_secret_hit hit;
  int r = tg_secret_scan(text, len, &hit);
  if (r == TG_E_TOO_LARGE) /* fail closed, but as the caller's problem, not ours */
    return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                   json_pack("{s:s,s:s}", "reason", "unscannable", "field", field),
                   "%s could not be checked for credentials within the scanner's limits; "
                   "split it or simplify it.",
                   field);
  if (r != 1) return r;
  return tg_fail(cx, TG_ERR_VALIDATION_FAILED,
                 json_pack("{s:s,s:s,s:s,s:I}", "reason", "secret", "field", field, "rule",
                           hit.rule, "line", (json_int_t)hit.line),
                 "%s holds what looks like a credential (rule %s, line %zu); remove it. Keep "
                 "secrets out of what agents write.",
                 field, hit.rule, hit.line);
}
