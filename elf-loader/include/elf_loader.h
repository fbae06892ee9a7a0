/* elf_loader.h: C ABI of the elf-loader crate (a custom ELF loader that loads the same
 * shared library many times in one process, isolated).
 *
 * Every function returns a status code (ELF_LOADER_OK or a negative ELF_LOADER_ERR_*)
 * or NULL on failure, and leaves a message for elf_loader_last_error() (per thread).
 * Handles are checked: NULL, unknown or deleted handles, and a namespace handle passed
 * as a library handle (or the reverse), give ELF_LOADER_ERR_ARG.
 * A panic inside the loader never unwinds into C: it gives ELF_LOADER_ERR_PANIC (or NULL)
 * and a message naming it (the handles involved may be half-changed: delete them).
 * This header is checked against the Rust signatures by tests/it/capi.rs. */
#ifndef ELF_LOADER_H
#define ELF_LOADER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ELF_LOADER_OK 0
#define ELF_LOADER_ERR_ARG (-1)
#define ELF_LOADER_ERR_LOAD (-2)
#define ELF_LOADER_ERR_STATE (-3)
#define ELF_LOADER_ERR_NOT_FOUND (-4)
#define ELF_LOADER_ERR_PANIC (-5)

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
 * call on this thread. */
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
 * block is allocated on its first access); NULL for NULL or for a variable of a
 * library that is no longer loaded. */
void *elf_loader_tls_get_addr(const elf_loader_tls_index *ti);

/* Releases a library handle (its namespace unloads once no handle remains). */
int elf_loader_library_delete(elf_loader_library *lib);

/* Number of TLS blocks currently allocated for custom-loaded modules (all threads). */
size_t elf_loader_tls_live_blocks(void);

#ifdef __cplusplus
}
#endif

#endif /* ELF_LOADER_H */
