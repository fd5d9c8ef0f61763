#include "tools/providers.h"

const tg_provider *const tg_builtin_providers[] = {
    &tg_provider_admin,
    &tg_provider_work,
    &tg_provider_knowledge,
    &tg_provider_repo,
    &tg_provider_agents,
};
const size_t tg_builtin_providers_count =
    sizeof tg_builtin_providers / sizeof tg_builtin_providers[0];
