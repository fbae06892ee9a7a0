//! `breakpoint`: stops at the entry of a named Python function and prints its arguments,
//! without `sys.settrace` (PEP 523's debugging use case): an eval-frame hook looks at
//! each code object once, marks every other code object skipped (so their later calls
//! never reach the hook), and stops on frames of the target.
//!
//! ```text
//! cargo run -p frame-hooks --example breakpoint -- [--python python3.12] [--interactive] FUNCTION script.py [args...]
//! ```
//!
//! FUNCTION is a qualified name (`Class.method`, `outer.<locals>.inner`) or a plain name.
//! With `--interactive` (or when stdin is a terminal) each stop waits for a command:
//! `c` (or an empty line) continues, `q` raises `RuntimeError` in the stopped frame.

use frame_hooks::cpython::{EvalResult, Frame, FrameHook, FrameOwner, Libpython, Python};
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

struct Breakpoint {
    target: String,
    interactive: bool,
    hits: AtomicU64,
}

impl FrameHook for Breakpoint {
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        let code = frame.code();
        let qualname = code.qualname();
        if qualname != self.target && code.name() != self.target {
            frame.skip_code();
            return frame.pass_through();
        }
        // A generator function's arguments are seen at its call; its resumptions are not
        // entries.
        if frame.owner() != FrameOwner::Thread {
            return frame.pass_through();
        }
        let n = self.hits.fetch_add(1, Ordering::Relaxed) + 1;
        let api = frame.python().api();
        // SAFETY: the GIL is held inside a hook.
        unsafe { api.flush_std_streams() };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "breakpoint {n}: {qualname} at {}:{}",
            code.filename(),
            code.first_line()
        );
        for (name, value) in frame.arguments() {
            let _ = writeln!(out, "    {name} = {value}");
        }
        let _ = out.flush();
        drop(out);
        if self.interactive {
            loop {
                print!("(break) ");
                let _ = std::io::stdout().flush();
                let mut line = String::new();
                if std::io::stdin().lock().read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                match line.trim() {
                    "" | "c" => break,
                    "q" => return frame.raise("quit at breakpoint"),
                    other => println!("unknown command {other:?}: c continues, q quits"),
                }
            }
        }
        // Nothing to do once the function returns: let it run without this hook's frame.
        frame.pass_through()
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let usage = "usage: breakpoint [--python PYTHON] [--interactive] FUNCTION script.py [args...]";
    let mut args = std::env::args().skip(1).peekable();
    let mut python = "python3".to_string();
    let mut interactive = std::io::stdin().is_terminal();
    while let Some(a) = args.peek() {
        match a.as_str() {
            "--python" => {
                args.next();
                match args.next() {
                    Some(p) => python = p,
                    None => {
                        eprintln!("breakpoint: --python needs a value\n{usage}");
                        return ExitCode::from(2);
                    }
                }
            }
            "--interactive" => {
                args.next();
                interactive = true;
            }
            _ => break,
        }
    }
    let (Some(target), Some(script)) = (args.next(), args.next()) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    if !std::path::Path::new(&script).is_file() {
        eprintln!("breakpoint: {script}: no such script");
        return ExitCode::from(2);
    }
    let rest: Vec<String> = args.collect();
    let run = || -> Result<(u64, i64), Box<dyn std::error::Error>> {
        // SAFETY: the path is the interpreter's own shared libpython (from its sysconfig).
        let lib = unsafe { Libpython::open(Libpython::find_program(&python)?)? };
        lib.initialize()?;
        // SAFETY: dlsym on that library's handle finds that library's symbols.
        let py = unsafe { Python::new(&lib.resolver())? };
        let bp = Arc::new(Breakpoint {
            target: target.clone(),
            interactive,
            hits: AtomicU64::new(0),
        });
        let mut hook = py.install(bp.clone())?;
        let exit = py.run_script(&script, &rest);
        hook.uninstall()?;
        Ok((bp.hits.load(Ordering::Relaxed), exit?.unwrap_or(0)))
    };
    // Python runs on a thread with a large stack: hook frames (large in a debug build)
    // sit between Python's, and recursion that `python` survives must not overflow ours.
    let outcome = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("python".into())
            .stack_size(256 << 20)
            .spawn_scoped(s, || run().map_err(|e| e.to_string()))
            .map_err(|e| format!("cannot start the Python thread: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("the Python thread panicked".into()))
    });
    match outcome {
        Ok((hits, code)) => {
            println!("{target}: {hits} breakpoint hit(s)");
            // The status the `python` command would give (`sys.exit(-1)` is 255).
            ExitCode::from((code & 0xff) as u8)
        }
        Err(e) => {
            eprintln!("breakpoint: error: {e}");
            ExitCode::FAILURE
        }
    }
}
