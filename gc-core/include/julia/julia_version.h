/* julia_version.h of the Julia-compatibility prefix: the Julia version whose API and
 * GC behaviour the prefix offers (1.6: the julia-gcext API as GAP 4.12 uses it, with
 * single-threaded marking). */
#ifndef JL_VERSION_H
#define JL_VERSION_H
#define JULIA_VERSION_STRING "1.6.0-gccore"
#define JULIA_VERSION_MAJOR 1
#define JULIA_VERSION_MINOR 6
#define JULIA_VERSION_PATCH 0
#define JULIA_VERSION_IS_RELEASE 0
#endif /* JL_VERSION_H */
