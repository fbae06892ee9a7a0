//! integration-tests' scenario tests, one binary (each file a module): the C extension
//! (`cext_*`), two copies of frame-hooks, minigap (`minigap_*`: language, GC, example)
//! and numpy in many interpreters (`multipy_*`). Three multipy files stay binaries of
//! their own because they measure or compare the whole process: `multipy_unload.rs` (the
//! process's mappings, thread count and `loaded_image_count() == 0` before and after),
//! `multipy_versions.rs` (no image left loaded; `PYTHONOPTIMIZE` set process-wide) and
//! `multipy_stdlib_suite.rs` (CPython's regrtest against a plain `python` process: with
//! another test running alongside in the same process, the first of two runs differed).

mod cext_example;
mod cext_scenario;
mod frame_hooks_two_copies;
mod minigap_example;
mod minigap_gc;
mod minigap_language;
mod multipy_basic;
mod multipy_bootstrap_cache;
mod multipy_common;
mod multipy_example;
mod multipy_many;
mod multipy_numpy_suite;
mod multipy_pickled;
mod multipy_profiler;
