/* unity_boehm.c: minigap on Boehm GC, as one translation unit (only the mg_boehm_* API
   is exported). */
#define MG_PREFIX mg_boehm_
#include "kernel.h"
#include "gasman_boehm.c"
#include "integer.c"
#include "objects.c"
#include "print.c"
#include "interp.c"
#include "group.c"
#include "builtins.c"
#include "minigap.c"
