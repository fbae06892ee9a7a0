/* julia_threads.h of the Julia-compatibility prefix: jl_ptls_t and jl_get_ptls_states
 * come from julia_gcext_compat.h (see julia.h). */
#ifndef JULIA_THREADS_H
#define JULIA_THREADS_H
#include "julia.h"
#endif /* JULIA_THREADS_H */
