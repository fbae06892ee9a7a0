/* elf_loader.h: C ABI of the elf-loader crate (a custom ELF loader that loads the same
 * shared library many times in one process, isolated).
 *
 * Every function returns a status code (ELF_LOADER_OK or a negative ELF_LOADER_ERR_*,
 * aliases of the workspace's shared RT_* codes) or NULL on failure, and leaves a message
 * for elf_loader_last_error() (per thread).
 * Handles are checked: NULL, unknown or deleted handles, and a namespace handle passed
 * as a library handle (or the reverse), give ELF_LOADER_ERR_ARG.
 * A panic inside the loader never unwinds into C: it gives ELF_LOADER_ERR_PANIC (or NULL)
 * and a message naming it (the handles involved may be half-changed: delete them).
 * This header is checked against the Rust side (elf-loader/capi/src/lib.rs) by
 * elf-loader/capi/tests/it/header.rs. */
#ifndef ELF_LOADER_H
#define ELF_LOADER_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN rt_status: generated from support/ffi (ffi_support::c_block), the same in every header. */
#ifndef RT_STATUS_DEFINED
#define RT_STATUS_DEFINED
/* The workspace's one C convention: a function that can fail returns an rt_status
 * (RT_OK, or a negative RT_ERR_* code; a crate's own names are aliases of these) or
 * NULL, and leaves a message, per thread, for its library's *_last_error(). No
 * panic crosses the boundary: it becomes RT_ERR_PANIC (or NULL) and a message. */
typedef int32_t rt_status;
#define RT_OK                    0     /* success */
#define RT_ERR_ARG               (-1)  /* a NULL pointer, a bad handle or string, a value out of range */
#define RT_ERR_SHUT_DOWN         (-2)  /* shut down: the thread must leave */
#define RT_ERR_STOPPED           (-3)  /* the thread was asked to stop: unwind */
#define RT_ERR_NOT_ATTACHED      (-4)  /* the calling thread is not attached */
#define RT_ERR_ALREADY_ATTACHED  (-5)  /* the calling thread is already attached */
#define RT_ERR_NOT_HOLDER        (-6)  /* released a lock the thread does not hold */
#define RT_ERR_NOT_FOUND         (-7)  /* no such thread id, symbol or entry */
#define RT_ERR_TIMEOUT           (-8)  /* a wait ran out of time */
#define RT_ERR_PANIC             (-9)  /* an internal panic, caught at the C boundary */
#define RT_ERR_CONFIG            (-10) /* a configuration value is out of range */
#define RT_ERR_ALREADY_SHUT_DOWN (-11) /* shutdown was already called */
#define RT_ERR_INSIDE_ACTION     (-12) /* not allowed inside a safepoint action */
#define RT_ERR_INSIDE_HOOK       (-13) /* not allowed inside a block/unblock hook */
#define RT_ERR_INSIDE_REGION     (-14) /* not allowed inside a blocking region */
#define RT_ERR_STATE             (-15) /* not allowed in the current state */
#define RT_ERR_OOM               (-16) /* out of memory or over a memory cap */
#define RT_ERR_LOAD              (-17) /* loading foreign code failed */
#define RT_ERR_REFUSED           (-18) /* a lower layer refused: the message has its text */
#endif
/* END rt_status */

#ifdef __cplusplus
extern "C" {
#endif

/* elf-loader's status names: aliases of the shared codes above (the values changed from
 * the loader's own -2..-5 when it adopted them: test the names, not the numbers). */
#define ELF_LOADER_OK RT_OK
#define ELF_LOADER_ERR_ARG RT_ERR_ARG
#define ELF_LOADER_ERR_LOAD RT_ERR_LOAD
#define ELF_LOADER_ERR_STATE RT_ERR_STATE
#define ELF_LOADER_ERR_NOT_FOUND RT_ERR_NOT_FOUND
#define ELF_LOADER_ERR_PANIC RT_ERR_PANIC

/* An isolated world of custom-loaded libraries. */
typedef struct elf_loader_namespace elf_loader_namespace;
/* One custom-loaded library. */
typedef struct elf_loader_library elf_loader_library;

/* tls_index of a thread-local symbol (module id, offset), as __tls_get_addr takes it. */
typedef struct elf_loader_tls_index {
    uint64_t module;
    uint64_t offset;
} elf_loader_tls_index;

/* The message of the last failure on this thread ("" if none); valid until the next
 * failure on this thread. */
const char *elf_loader_last_error(void);

/* A new, empty namespace; NULL on failure. */
elf_loader_namespace *elf_loader_namespace_new(const char *name);

/* Releases a namespace handle; its libraries are unloaded (fini, unmap) once no
 * library handle of it remains either. */
int elf_loader_namespace_delete(elf_loader_namespace *ns);

/* Loads path and its dependencies into ns; *out receives a new library handle. */
int elf_loader_namespace_load(elf_loader_namespace *ns, const char *path, elf_loader_library **out);

/* A library to be loaded from path into a namespace of its own; NULL on failure. */
elf_loader_library *elf_loader_library_create(const char *path);

/* Adds another custom library as a search library of lib (before load). */
int elf_loader_library_add_search_library(elf_loader_library *lib, const elf_loader_library *provider);

/* Adds a dlopen handle (or NULL for RTLD_DEFAULT) as a search library (before load);
 * the handle must outlive lib and is not closed by the loader. */
int elf_loader_library_add_search_system(elf_loader_library *lib, void *handle);

/* Maps, relocates and initialises lib (and its dependencies). */
int elf_loader_library_load(elf_loader_library *lib);

/* Address of name (the library first, then its search libraries), or NULL. */
void *elf_loader_library_sym(const elf_loader_library *lib, const char *name);

/* TLS index of the thread-local symbol name, stored in *out. */
int elf_loader_library_tls_sym(const elf_loader_library *lib, const char *name, elf_loader_tls_index *out);

/* The calling thread's address of the thread-local variable ti (from
 * elf_loader_library_tls_sym) names, as the library's own code sees it (the thread's
 * block is allocated on its first access); NULL for NULL, module 0, a variable of a
 * library that is no longer loaded, or an offset outside its TLS block. */
void *elf_loader_tls_get_addr(const elf_loader_tls_index *ti);

/* Releases a library handle (its namespace unloads once no handle remains). */
int elf_loader_library_delete(elf_loader_library *lib);

/* Number of TLS blocks currently allocated for custom-loaded modules (all threads). */
size_t elf_loader_tls_live_blocks(void);

#ifdef __cplusplus
}
#endif

#endif /* ELF_LOADER_H */
