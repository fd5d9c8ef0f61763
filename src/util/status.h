/* Status codes of internal functions: 0 is success, failures are negative TG_E_*.
 * Tool-level failures seen by callers are the envelope codes of core/error.h instead. */
#pragma once

#define TG_OK 0
#define TG_E_NOMEM (-1)      /* allocation failed */
#define TG_E_DB (-2)         /* the database reported an error */
#define TG_E_BUSY (-3)       /* the database stayed locked past the busy timeout */
#define TG_E_CONSTRAINT (-4) /* a uniqueness or foreign-key constraint refused a write */
#define TG_E_INVAL (-5)      /* bad input */
#define TG_E_NOTFOUND (-6)   /* no such thing */
#define TG_E_IO (-7)         /* file system error */
#define TG_E_TOO_LARGE (-8)  /* a bound was hit */
#define TG_E_TOOL (-9)       /* a tool call ended with an error envelope */
#define TG_E_LOCKED (-10)    /* a lock file of another program stayed taken */

/* What a status says, for logs ("out of memory", ...). */
const char *tg_status_text(int status);
