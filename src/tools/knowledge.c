#include "tools/providers.h"

const tg_provider tg_provider_knowledge = {.name = "knowledge", .spec_file = "knowledge.json"};
