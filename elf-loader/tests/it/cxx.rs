//! C++ exceptions thrown in one custom-loaded library, passing through a frame of
//! another, caught in the first: the unwinder finds custom-loaded code's `.eh_frame`.

use crate::common;

use elf_loader::Namespace;
use std::ffi::CStr;

#[test]
fn exception_caught_across_custom_loaded_frames() {
    let thrower = common::build_so("cxx_thrower", &["cxx_thrower.cpp"], &[]);
    let middle = common::build_so(
        "cxx_middle",
        &["cxx_middle.cpp"],
        &["-lcxx_thrower", "-Wl,-rpath,$ORIGIN"],
    );
    for round in 0..3 {
        let ns = Namespace::new(&format!("cxx{round}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let m = unsafe { ns.load(&middle) }.unwrap();
        let t = elf_loader::CustomLibrary::create_in(&ns, &thrower);
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        unsafe { t.load() }.unwrap();
        // SAFETY: signatures as in the fixtures.
        let (call_and_catch, middle_fn, last_what, global_value) = unsafe {
            (
                t.get::<extern "C" fn(extern "C" fn(i32) -> i32, i32) -> i32>("call_and_catch")
                    .unwrap()
                    .into_raw(),
                m.get::<extern "C" fn(i32) -> i32>("middle")
                    .unwrap()
                    .into_raw(),
                t.get::<extern "C" fn() -> *const std::ffi::c_char>("last_what")
                    .unwrap()
                    .into_raw(),
                t.get::<extern "C" fn() -> i32>("global_value")
                    .unwrap()
                    .into_raw(),
            )
        };
        assert_eq!(global_value(), 7, "C++ static constructor ran");
        assert_eq!(call_and_catch(middle_fn, 4), 8);
        assert_eq!(
            call_and_catch(middle_fn, 20),
            -1,
            "exception caught across the middle library's frame"
        );
        // SAFETY: NUL-terminated std::string contents.
        let what = unsafe { CStr::from_ptr(last_what()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(what, "too big: 20");
        // Unloading runs the C++ static destructors (through __cxa_finalize) and
        // deregisters the frames; the next round loads fresh copies.
    }
}
