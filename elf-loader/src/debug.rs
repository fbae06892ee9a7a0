//! Making custom-loaded code visible to unwinders and debuggers.
//!
//! - Unwinding: each image's `.eh_frame` (found through `PT_GNU_EH_FRAME`) is registered
//!   with libgcc's `__register_frame`, so C++ exceptions (and Rust panics) unwind through
//!   custom-loaded frames; deregistered at unload.
//! - Debuggers: glibc's `r_debug` (`_r_debug`, version 2) chains one `r_debug_extended`
//!   per namespace through `r_next`. We append one of our own whose `r_map` list holds a
//!   `struct link_map` (the public part: `l_addr`, `l_name`, `l_ld`, `l_next`, `l_prev`)
//!   per custom image, and call the `r_brk` hook (`_dl_debug_state`) around each change,
//!   so gdb re-reads the lists and shows custom-loaded code's symbols. Our nodes never
//!   enter glibc's own list (glibc reads private fields past the public ones).

use crate::elf::consts::PF_R;
use crate::image::Image;
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

#[repr(C)]
struct RDebugExtended {
    r_version: c_int,
    r_map: *mut LinkMap,
    r_brk: usize,
    r_state: c_int,
    r_ldbase: usize,
    r_next: *mut RDebugExtended,
}

const RT_CONSISTENT: c_int = 0;
const RT_ADD: c_int = 1;
const RT_DELETE: c_int = 2;

struct DebugState {
    /// Our r_debug_extended (leaked: debuggers may read it at any time).
    ours: *mut RDebugExtended,
    /// Nodes by image id.
    nodes: Vec<(u64, *mut LinkMap)>,
}

// SAFETY: the raw pointers are only dereferenced under the STATE mutex.
unsafe impl Send for DebugState {}

static STATE: Mutex<Option<DebugState>> = Mutex::new(None);

extern "C" {
    static mut _r_debug: RDebugExtended;
}

fn frame_fns() -> Option<(usize, usize)> {
    static F: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    *F.get_or_init(|| {
        // libgcc's frame registration functions.
        let r = crate::phdr::global_symbol(c"__register_frame")?;
        let d = crate::phdr::global_symbol(c"__deregister_frame")?;
        Some((r, d))
    })
}

/// Decodes the `.eh_frame` start from `.eh_frame_hdr` (version 1, pointer encodings
/// absolute or pc-relative, 4 or 8 bytes).
fn eh_frame_start(img: &Image) -> Option<usize> {
    let hdr = img.info.eh_frame_hdr?;
    if hdr.filesz < 8 {
        return None;
    }
    let at = img.addr(hdr.vaddr);
    // SAFETY: PT_GNU_EH_FRAME lies in a mapped segment (it is inside a PT_LOAD of every
    // linker-produced file; we checked its size above and read only its first 12 bytes).
    let inside = img.info.loads.iter().any(|l| {
        l.flags & PF_R != 0 && hdr.vaddr >= l.vaddr && hdr.vaddr + 12 <= l.vaddr + l.filesz
    });
    if !inside {
        return None;
    }
    // SAFETY: checked to lie inside a mapped segment's file contents.
    let b = unsafe { std::slice::from_raw_parts(at as *const u8, 12) };
    if b[0] != 1 {
        return None;
    }
    let enc = b[1];
    let field = at + 4;
    let (val, _) = match enc & 0x0f {
        0x03 => (u32::from_le_bytes(b[4..8].try_into().ok()?) as i64, 4),
        0x0b => (i32::from_le_bytes(b[4..8].try_into().ok()?) as i64, 4),
        0x04 | 0x0c => (i64::from_le_bytes(b[4..12].try_into().ok()?), 8),
        _ => return None,
    };
    let start = match enc & 0x70 {
        0x00 => val as usize,
        0x10 => (field as i64).wrapping_add(val) as usize,
        _ => return None,
    };
    // The unwinder reads .eh_frame from there on: it must lie in a readable segment's
    // file contents (a corrupt header must not make libgcc read unmapped memory).
    let readable = img.info.loads.iter().any(|l| {
        let lo = img.addr(l.vaddr);
        l.flags & PF_R != 0 && start >= lo && start + 4 <= lo + l.filesz as usize
    });
    readable.then_some(start)
}

fn call_brk(r: *mut RDebugExtended) {
    // SAFETY: r_brk is glibc's _dl_debug_state, an empty function debuggers break on.
    unsafe {
        let brk = (*r).r_brk;
        if brk != 0 {
            let f: extern "C" fn() = std::mem::transmute(brk);
            f();
        }
    }
}

/// Registers `img` with the unwinder and the debugger.
pub(crate) fn register(img: &Image) {
    if let (Some(start), Some((reg, _))) = (eh_frame_start(img), frame_fns()) {
        // SAFETY: `start` is the image's .eh_frame, which stays mapped until unregister.
        let f: extern "C" fn(*const c_void) = unsafe { std::mem::transmute(reg) };
        f(start as *const c_void);
        *img.eh_frame.lock() = Some(start);
    }
    let mut g = STATE.lock();
    let st = g.get_or_insert_with(|| {
        // Our struct is leaked so that a debugger can always read it.
        let glibc = &raw mut _r_debug;
        let ours = Box::into_raw(Box::new(RDebugExtended {
            r_version: 2,
            r_map: std::ptr::null_mut(),
            // SAFETY: reading glibc's r_debug (public ABI, always initialised).
            r_brk: unsafe { (*glibc).r_brk },
            r_state: RT_CONSISTENT,
            // SAFETY: as above.
            r_ldbase: unsafe { (*glibc).r_ldbase },
            r_next: std::ptr::null_mut(),
        }));
        // SAFETY: appending to the r_next chain (glibc appends its own namespaces the
        // same way, after walking to the end).
        unsafe {
            let mut pp = &raw mut (*glibc).r_next;
            while !(*pp).is_null() {
                pp = &raw mut (**pp).r_next;
            }
            *pp = ours;
            if (*glibc).r_version < 2 {
                (*glibc).r_version = 2;
            }
        }
        DebugState {
            ours,
            nodes: Vec::new(),
        }
    });
    let node = Box::into_raw(Box::new(LinkMap {
        l_addr: img.map.bias,
        l_name: img.c_path.as_ptr(),
        l_ld: img.addr(img.info.dynamic.vaddr) as *mut c_void,
        l_next: std::ptr::null_mut(),
        l_prev: std::ptr::null_mut(),
    }));
    // SAFETY: our own list, under the STATE lock.
    unsafe {
        (*st.ours).r_state = RT_ADD;
        call_brk(st.ours);
        match st.nodes.last() {
            Some(&(_, last)) => {
                (*last).l_next = node;
                (*node).l_prev = last;
            }
            None => (*st.ours).r_map = node,
        }
        (*st.ours).r_state = RT_CONSISTENT;
        call_brk(st.ours);
    }
    st.nodes.push((img.id, node));
}

/// Undoes [`register`] (before the image is unmapped).
pub(crate) fn unregister(img: &Image) {
    if let (Some(start), Some((_, dereg))) = (img.eh_frame.lock().take(), frame_fns()) {
        // SAFETY: deregistering what `register` registered; still mapped.
        let f: extern "C" fn(*const c_void) -> *mut c_void = unsafe { std::mem::transmute(dereg) };
        f(start as *const c_void);
    }
    let mut g = STATE.lock();
    let Some(st) = g.as_mut() else { return };
    let Some(pos) = st.nodes.iter().position(|(id, _)| *id == img.id) else {
        return;
    };
    let (_, node) = st.nodes.remove(pos);
    // SAFETY: unlinking our own node under the STATE lock, then freeing it.
    unsafe {
        (*st.ours).r_state = RT_DELETE;
        call_brk(st.ours);
        let prev = (*node).l_prev;
        let next = (*node).l_next;
        if prev.is_null() {
            (*st.ours).r_map = next;
        } else {
            (*prev).l_next = next;
        }
        if !next.is_null() {
            (*next).l_prev = prev;
        }
        (*st.ours).r_state = RT_CONSISTENT;
        call_brk(st.ours);
        drop(Box::from_raw(node));
    }
}
