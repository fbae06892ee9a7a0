//! The seed's names (`include/julia_gcext_compat.h`, and the Julia-compatibility
//! prefix's `julia.h` that real GAP compiles against), all in this module, over the
//! default heap:
//! - `types.rs`: the seed's types (`jl_value_t`, `jl_ptls_t`, the callback and mark
//!   function types) and symbols (`jl_symbol`);
//! - `gcext.rs`: the GC-extension API proper (`jl_get_ptls_states`, types, allocation,
//!   marking, callbacks, collections, barriers, tasks, GC-safe regions, weak
//!   references, finalizers, the last error);
//! - `runtime.rs`: the Julia runtime names a julia-gcext client uses beyond that API
//!   (`jl_init`, `jl_adopt_thread`, `jl_any_type`, `jl_gc_compat_init`,
//!   `jl_active_task_stack`, ...);
//! - `restore.rs`: Julia's safe-restore points (`jl_set_safe_restore`).
//!
//! The seed's ABI is Julia's: objects and the `ptls` stay raw pointers (a `ptls` is
//! checked by its magic and owning thread); no registry handle appears in it.

mod gcext;
mod restore;
mod runtime;
mod types;

pub use gcext::*;
pub use restore::*;
pub use runtime::*;
pub use types::*;
