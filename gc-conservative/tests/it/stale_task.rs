//! `scan_task` on a task that is not registered with the heap being collected (a
//! coroutine unregistered, then its stack unmapped, as `register_task`'s contract
//! allows; or a task of another heap) scans nothing: the safe function never reads a
//! stack its heap no longer vouches for.

use gc_core::{Callback, CollectionKind, Heap, HeapConfig, Task};
use std::sync::{Arc, Mutex};

/// An anonymous mapping of `len` bytes (a coroutine's stack).
fn map(len: usize) -> usize {
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p as usize
}

/// A root scanner that calls `scan_task` (and `scan_task_filtered`) on the task in
/// `slot` and records what they return.
fn scanner(slot: Arc<Mutex<Option<Arc<Task>>>>, seen: Arc<Mutex<Vec<usize>>>) -> Callback {
    Callback::RootScanner(Arc::new(move |mk, _| {
        if let Some(t) = slot.lock().unwrap().as_ref() {
            let n = gc_conservative::scan_task(mk, t);
            let f = gc_conservative::scan_task_filtered(mk, t, &mut |_| true);
            seen.lock().unwrap().extend([n, f]);
        }
    }))
}

#[test]
fn unregistered_unmapped_coroutine_scans_as_nothing() {
    let heap = Heap::new(HeapConfig {
        mark_threads: 1,
        ..HeapConfig::default()
    })
    .unwrap();
    gc_conservative::enable_conservative_scanning(&heap).unwrap();
    let mut m = heap.attach().unwrap();
    let blob = heap.new_layout_type("Blob", 64, &[]).unwrap();
    let len = 1 << 16;
    let lo = map(len);
    // SAFETY: [lo, lo + len) is our mapping, unmapped only after unregister_task.
    let task = unsafe { heap.register_task(lo, lo + len) }.unwrap();
    let obj = m.alloc_typed(64, blob).unwrap();
    // SAFETY: inside the mapping; the object's address is the coroutine's only reference.
    unsafe { ((lo + len - 64) as *mut usize).write(obj.addr()) };
    let slot = Arc::new(Mutex::new(Some(task.clone())));
    let seen = Arc::new(Mutex::new(Vec::new()));
    heap.add_callback(scanner(slot.clone(), seen.clone()))
        .unwrap();

    // Registered: scanned, the word on the coroutine's stack found by both calls.
    m.collect(CollectionKind::Full).unwrap();
    assert_eq!(*seen.lock().unwrap(), [1, 1]);

    // Unregistered, then unmapped: both calls scan nothing (it was a SIGSEGV).
    heap.unregister_task(&task).unwrap();
    // SAFETY: our mapping, no longer registered with any heap.
    assert_eq!(unsafe { libc::munmap(lo as *mut libc::c_void, len) }, 0);
    seen.lock().unwrap().clear();
    m.collect(CollectionKind::Full).unwrap();
    assert_eq!(*seen.lock().unwrap(), [0, 0]);
}

#[test]
fn task_of_another_heap_scans_as_nothing() {
    let other = Heap::new(HeapConfig::default()).unwrap();
    let len = 1 << 16;
    let lo = map(len);
    // SAFETY: [lo, lo + len) is our mapping, unmapped after the test unregisters it.
    let foreign = unsafe { other.register_task(lo, lo + len) }.unwrap();

    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let blob = heap.new_layout_type("Blob", 64, &[]).unwrap();
    let obj = m.alloc_typed(64, blob).unwrap();
    // SAFETY: inside the mapping.
    unsafe { ((lo + len - 64) as *mut usize).write(obj.addr()) };
    let slot = Arc::new(Mutex::new(Some(foreign.clone())));
    let seen = Arc::new(Mutex::new(Vec::new()));
    heap.add_callback(scanner(slot, seen.clone())).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [0, 0],
        "another heap's task is not scanned"
    );

    other.unregister_task(&foreign).unwrap();
    // SAFETY: our mapping, no longer registered.
    assert_eq!(unsafe { libc::munmap(lo as *mut libc::c_void, len) }, 0);
}

#[test]
fn exited_thread_task_scans_as_nothing() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let h2 = heap.clone();
    // A 64-MiB stack (above glibc's cache of thread stacks: unmapped when the thread
    // ends) whose last stop (a GC-safe region) left a saved stack pointer in its task.
    let task = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let mut mt = h2.attach().unwrap();
            mt.gc_safe(|| ());
            mt.task().clone()
        })
        .unwrap()
        .join()
        .unwrap();
    let (lo, hi) = task.stack_bounds();
    assert!(
        task.saved_sp() > lo && task.saved_sp() < hi,
        "the task kept a saved stack pointer"
    );
    let mut m = heap.attach().unwrap();
    let slot = Arc::new(Mutex::new(Some(task)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    heap.add_callback(scanner(slot, seen.clone())).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    assert_eq!(*seen.lock().unwrap(), [0, 0]);
}
