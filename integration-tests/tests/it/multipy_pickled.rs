//! `Interpreter::call_pickled`: a task sent as a protocol-5 pickle whose out-of-band
//! buffers are host memory (seen in the interpreter without a copy, kept alive until
//! its last view there is gone), and a result whose out-of-band buffers are the
//! interpreter's memory, lent to the host until released. The payloads are made by a
//! plain `python` of the same venv, as the host of a real executor makes them.

use crate::multipy_common::{interp, venv};
use integration_tests::multipy::{KeepAlive, LentBuffer};
use std::process::Command;
use std::sync::Arc;

/// `pickle.dumps(expr, protocol=5, buffer_callback=...)` in a plain python: the pickle.
fn pickled(expr: &str) -> Vec<u8> {
    let code = format!(
        "import pickle, sys, operator, math\nbufs = []\n\
         data = pickle.dumps({expr}, protocol=5, buffer_callback=bufs.append)\n\
         assert len(bufs) <= 1\nsys.stdout.buffer.write(data)"
    );
    let out = Command::new(venv().join("bin/python"))
        .args(["-c", &code])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A plain python's `pickle.loads(data, buffers=...)`, printed with repr.
fn unpickled(data: &[u8], buffers: &[&[u8]]) -> String {
    let hexes: Vec<String> = buffers.iter().map(|b| hex(b)).collect();
    let code = format!(
        "import pickle, sys\nbufs = [bytearray.fromhex(h) for h in {hexes:?}]\n\
         print(repr(pickle.loads(bytes.fromhex({:?}), buffers=bufs)))",
        hex(data)
    );
    let out = Command::new(venv().join("bin/python"))
        .args(["-c", &code])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn a_pickled_call_returns_its_pickled_result() {
    let i = interp();
    let payload = pickled("(math.fsum, ([1.5, 2.25],), {})");
    // SAFETY: no lent buffer.
    let r = unsafe { i.call_pickled(&payload, Vec::new(), &[]) }.unwrap();
    assert!(!r.raised);
    assert!(r.buffers.is_empty());
    assert_eq!(unpickled(&r.payload, &[]), "3.75");
}

#[test]
fn a_lent_buffer_is_seen_without_a_copy_and_given_back_after_its_last_view() {
    let i = interp();
    let memory: Arc<Vec<u8>> = Arc::new(b"host bytes".to_vec());
    // bytes(buffer) copies the buffer out: the worker reads the host's memory through
    // the lent buffer (the pickle's own bytes are not sent).
    let payload = pickled("(bytes, (pickle.PickleBuffer(bytearray(b'ignored!!!')),), {})");
    let keep: KeepAlive = memory.clone();
    let lent = LentBuffer {
        ptr: memory.as_ptr(),
        len: memory.len(),
        readonly: true,
        keep,
    };
    // SAFETY: `memory` lives as long as its `keep` (an Arc of it) and is never written.
    let r = unsafe { i.call_pickled(&payload, vec![lent], &[]) }.unwrap();
    assert!(!r.raised, "{}", unpickled(&r.payload, &[]));
    assert_eq!(unpickled(&r.payload, &[]), "b'host bytes'");
    assert_eq!(
        Arc::strong_count(&memory),
        1,
        "the worker's view died with the call"
    );
    assert_eq!(i.shared_buffer_views(), 0);
}

#[test]
fn a_read_only_buffer_refuses_writes_and_a_writable_one_is_shared_both_ways() {
    let i = interp();
    let payload = pickled(
        "(exec, ('memoryview(b)[0] = 120', {'b': pickle.PickleBuffer(bytearray(b'x'))}), {})",
    );
    let memory = Arc::new(std::sync::Mutex::new(vec![0u8; 4]));
    let ptr = memory.lock().unwrap().as_mut_ptr();
    for readonly in [true, false] {
        let keep: KeepAlive = memory.clone();
        let lent = LentBuffer {
            ptr,
            len: 4,
            readonly,
            keep,
        };
        // SAFETY: the Vec lives (and is not moved) as long as its Arc; the host does
        // not touch it during the call.
        let r = unsafe { i.call_pickled(&payload, vec![lent], &[]) }.unwrap();
        if readonly {
            assert!(r.raised);
            let text = unpickled(&r.payload, &[]);
            assert!(text.contains("TypeError"), "{text}");
            assert_eq!(memory.lock().unwrap()[0], 0);
        } else {
            assert!(!r.raised, "{}", unpickled(&r.payload, &[]));
            assert_eq!(
                memory.lock().unwrap()[0],
                120,
                "the worker wrote the host's memory"
            );
        }
    }
}

#[test]
fn a_result_buffer_is_lent_to_the_host_until_released() {
    let i = interp();
    let payload = pickled("(pickle.PickleBuffer, (bytearray(b'result bytes'),), {})");
    // SAFETY: no lent buffer.
    let r = unsafe { i.call_pickled(&payload, Vec::new(), &[]) }.unwrap();
    assert!(!r.raised);
    assert_eq!(r.buffers.len(), 1, "a PickleBuffer pickles out of band");
    let b = r.buffers[0];
    // SAFETY: lent by the interpreter until released below.
    let bytes = unsafe { std::slice::from_raw_parts(b.ptr, b.len) }.to_vec();
    assert_eq!(bytes, b"result bytes");
    assert_eq!(
        unpickled(&r.payload, &[&bytes]),
        "bytearray(b'result bytes')"
    );
    assert!(!b.readonly, "a bytearray is writable");
    // The lent buffer is held by the interpreter: give it back (once; twice is harmless).
    let held = i.eval("__import__('gc').collect() or 0").unwrap();
    assert_eq!(held, serde_json::json!(0));
    i.release_borrowed(&[b.id]);
    i.release_borrowed(&[b.id]);
    // A later call may release too; an unknown id is ignored.
    // SAFETY: no lent buffer.
    let r = unsafe { i.call_pickled(&pickled("(len, ('ab',), {})"), Vec::new(), &[b.id, 12345]) }
        .unwrap();
    assert_eq!(unpickled(&r.payload, &[]), "2");
}

#[test]
fn an_exception_carries_the_workers_traceback() {
    let i = interp();
    let payload = pickled("(int, ('not a number',), {})");
    // SAFETY: no lent buffer.
    let r = unsafe { i.call_pickled(&payload, Vec::new(), &[]) }.unwrap();
    assert!(r.raised);
    // Unpickled as ProcessPoolExecutor's workers' exceptions: the exception, with the
    // worker's traceback as its __cause__.
    let code = format!(
        "import pickle\ne = pickle.loads(bytes.fromhex({:?}))\n\
         print(type(e).__name__, '|', e, '|', type(e.__cause__).__name__, '|', 'Traceback' in str(e.__cause__))",
        hex(&r.payload)
    );
    let out = Command::new(venv().join("bin/python"))
        .args(["-c", &code])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ValueError | invalid literal for int() with base 10: 'not a number' | _RemoteTraceback | True",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An unpicklable result is an exception saying so, not a lost call.
    let payload = pickled("(eval, ('lambda: 1',), {})");
    // SAFETY: no lent buffer.
    let r = unsafe { i.call_pickled(&payload, Vec::new(), &[]) }.unwrap();
    assert!(r.raised);
    let code = format!(
        "import pickle\nprint(pickle.loads(bytes.fromhex({:?})))",
        hex(&r.payload)
    );
    let out = Command::new(venv().join("bin/python"))
        .args(["-c", &code])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("result could not be pickled"), "{text}");
}
