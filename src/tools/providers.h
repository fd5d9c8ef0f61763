/* The providers built into the binary, registered by main in this order. */
#pragma once
#include <stddef.h>

#include "core/tool.h"

extern const tg_provider tg_provider_admin;
extern const tg_provider tg_provider_work;
extern const tg_provider tg_provider_knowledge;
extern const tg_provider tg_provider_repo;
extern const tg_provider tg_provider_agents;

extern const tg_provider *const tg_builtin_providers[];
extern const size_t tg_builtin_providers_count;
