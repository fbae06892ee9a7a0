/* julia_gcext.h of the Julia-compatibility prefix: the GC-extension API, from
 * julia_gcext_compat.h (see julia.h). */
#ifndef JULIA_GCEXT_H
#define JULIA_GCEXT_H
#include "julia.h"
#endif /* JULIA_GCEXT_H */
