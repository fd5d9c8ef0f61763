#include "tools/providers.h"

const tg_provider tg_provider_work = {.name = "work", .spec_file = "work.json"};
