/* unity_ours.c: minigap on gc-core + gc-conservative + gil, as one translation unit
   (every kernel name is static; only the mg_ours_* API is exported). */
#define MG_PREFIX mg_ours_
#include "kernel.h"
#include "gasman_ours.c"
#include "integer.c"
#include "objects.c"
#include "print.c"
#include "interp.c"
#include "group.c"
#include "builtins.c"
#include "minigap.c"
