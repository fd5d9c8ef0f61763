#include "core/tool.h"

#include <string.h>

static const char *const surface_names[] = {"agent", "mcp", "api"};

const char *tg_surface_name(tg_surface surface) {
  for (unsigned i = 0; i < 3; i++)
    if (surface == (1u << i)) return surface_names[i];
  return "unknown";
}

tg_surface tg_surface_parse(const char *name) {
  for (unsigned i = 0; i < 3; i++)
    if (strcmp(name, surface_names[i]) == 0) return (tg_surface)(1u << i);
  return 0;
}

const char *tg_effect_name(tg_effect effect) {
  static const char *const names[] = {"read", "write", "propose"};
  return names[effect];
}

const char *tg_risk_name(tg_risk risk) {
  static const char *const names[] = {"low", "medium", "high"};
  return names[risk];
}
