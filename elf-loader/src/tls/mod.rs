//! Thread-local storage for custom-loaded libraries.
//!
//! Each custom-loaded library with a `PT_TLS` segment is a *module* with an id of our own:
//! bit 63 set (system module ids are small integers), a slot number in the low 32 bits
//! and a never-reused sequence number in bits 32..63. `DTPMOD64` relocations store that
//! id; the loader's own `__tls_get_addr` (which custom libraries are bound to) serves our
//! ids and forwards every other id to the system's `__tls_get_addr`. `R_X86_64_TLSDESC`
//! descriptors point at the loader's TLS descriptor functions (`tlsdesc_*`).
//!
//! A thread's block for a module is allocated on its first access (so threads created
//! before and after the load are alike), initialised from the relocated init image plus
//! zeroed tbss. Blocks are owned by the module's registry entry: they are freed when the
//! module is unloaded, or after the thread has exited, whichever comes first; a stale
//! cache entry never matches because ids are never reused.
//!
//! Thread exit, in glibc's order (`nptl/pthread_create.c`, `start_thread`): the
//! `thread_local` destructors (`__call_tls_dtors`, C++'s and Rust's), then the pthread
//! key destructors (`__nptl_deallocate_tsd`, up to four rounds), then glibc's own
//! cleanup; the thread's dynamic TLS blocks are freed only after that, when its stack
//! is reused. Libraries rely on the order: jemalloc (bundled by pyarrow and duckdb)
//! stores the address of its thread-local data as a pthread key value and writes
//! through it from the key destructor. So a thread's blocks stay valid through all of
//! that: when the thread's cache is destroyed (a Rust thread-local destructor, the first
//! of those steps) the thread is *retired*, its blocks stay where they are (a later
//! access, from a key destructor, finds them by the thread's key), and they are freed
//! once the kernel reports the thread gone ([`reap_exited_threads`], run on the next
//! retirement, block allocation, load or unload).
//!
//! Initial-exec TLS (`TPOFF64` against a custom library's own variables, `DF_STATIC_TLS`):
//! the access is `%fs`-relative with an offset fixed at load, so the block must be at the
//! same offset from every thread's thread pointer, i.e. in the static TLS block that
//! each thread gets when it starts. glibc gives a `dlopen`ed library a slot of its
//! surplus static TLS; this loader has a static pool of its own for the same purpose
//! (`elf_loader_static_tls_pool`, [`STATIC_POOL_SIZE`] zero bytes of the loader's
//! `.tdata`, i.e. of the TLS init image glibc copies into every thread's static TLS
//! when the thread starts). A module flagged `DF_STATIC_TLS` gets a never-reused part
//! of it while there is room (glibc does not reuse its surplus either); its block in
//! every thread is then `tp + offset`, which the general-dynamic paths serve too. For a
//! module with initialised data (`.tdata`), after its relocation its image is copied
//! into the loading thread's part, into the loader's init image (pages made writable
//! for the copy, `RELRO` restored after), so every thread started later starts with it,
//! and into the part of every thread already running (`broadcast.rs`: glibc walks its
//! own thread list for this; here each thread copies into its own static TLS on a
//! signal, and a thread that does not answer fails the load, naming it).
//!
//! Fast path: each thread has an array of its own, slot -> (module id, block) (the
//! loader's dtv), found through a 16-byte thread-local of the loader library itself
//! (`elf_loader_tls_dtv`: pointer and length), defined and read in assembly with the
//! initial-exec model, so that it is one `%fs`-relative access (local-exec once linked
//! into an executable) and the loader's `__tls_get_addr` and dynamic TLS descriptor
//! serve a cached block in about ten instructions, with no lock and no call. A miss
//! (first access of the thread, another module in the slot, a system module) goes to
//! Rust code, which allocates, caches and answers.

//!
//! Where the parts live, from the bottom:
//! - `static_tls.rs`: the loader's own static TLS (the dtv word pair, the static pool and
//!   its copy in the TLS init image), `Template`, the thread pointer;
//! - `registry.rs`: modules and their blocks, each thread's dtv, thread retirement;
//! - `entries.rs`: `__tls_get_addr` and the TLS descriptors (the assembly and its slow
//!   paths, the copies near custom libraries), `TlsIndex`.

mod entries;
mod registry;
mod static_tls;

pub use entries::TlsIndex;
pub(crate) use entries::{
    address_in_thread, near_entries, tls_get_addr_entry, tlsdesc_dynamic, tlsdesc_static,
    tlsdesc_undefweak,
};
pub(crate) use registry::{
    allocated_block, block_for, publish_static, register, static_offset, unregister,
};
pub use registry::{live_blocks, reap_exited_threads, OUR_MODULE};
pub use static_tls::{static_pool_free, STATIC_POOL_SIZE};
pub(crate) use static_tls::{static_tls_offset, Template};
