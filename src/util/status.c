#include "util/status.h"

const char *tg_status_text(int status) {
  switch (status) {
  case TG_OK: return "success";
  case TG_E_NOMEM: return "out of memory";
  case TG_E_DB: return "database error";
  case TG_E_BUSY: return "the database stayed locked";
  case TG_E_CONSTRAINT: return "a database constraint refused the write";
  case TG_E_INVAL: return "bad input";
  case TG_E_NOTFOUND: return "not found";
  case TG_E_IO: return "input/output failed";
  case TG_E_TOO_LARGE: return "a bound was hit";
  case TG_E_TOOL: return "the tool failed";
  case TG_E_LOCKED: return "a lock file stayed taken";
  default: return "unknown status";
  }
}
