//! `multipy`: runs Python code in N interpreters of one process at once, one thread each
//! (each interpreter a fresh libpython copy loaded by elf-loader).
//!
//! ```text
//! cargo run --release -p integration-tests --example multipy -- \
//!     [--interpreters N] [--python X.Y|PATH] [--venv DIR] [--threads-per-interpreter K] \
//!     (-c CODE | -m MODULE [ARGS...] | FILE [ARGS...])
//! ```
//!
//! Every line an interpreter prints is prefixed `[i] `. In the code, the globals `COPY`
//! (0..N-1) and `NCOPIES` are set. The exit status is non-zero if any interpreter
//! raised (or exited with a non-zero `SystemExit`). The last line is
//! `multipy: K/N interpreters ok, start-up S s, run R s`.
//!
//! With `--threads-per-interpreter K`, K threads run the code in each interpreter: the
//! first is the interpreter's own main thread, the others are threads of the program
//! (they share that interpreter's GIL). The process's stdin is interpreter 0's (the
//! others' `sys.stdin` refuses reads, naming why). No interpreter installs signal
//! handlers, so Ctrl-C ends the process as for any program without a handler (the lines
//! printed so far are out). Warnings are printed; `RUST_LOG=info` shows the loader's and
//! the layer's trace.

use integration_tests::multipy::{self, Config, Error, Interpreter, PythonSpec, Stream};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

const USAGE: &str = "usage: multipy [--interpreters N] [--python X.Y|PATH] [--venv DIR] \
[--threads-per-interpreter K] (-c CODE | -m MODULE [ARGS...] | FILE [ARGS...])";

enum What {
    Code(String),
    Module(String),
    File(PathBuf),
}

struct Args {
    interpreters: usize,
    python: PythonSpec,
    venv: Option<PathBuf>,
    threads: usize,
    what: What,
    args: Vec<String>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        interpreters: 2,
        python: PythonSpec::Default,
        venv: None,
        threads: 1,
        what: What::Code(String::new()),
        args: Vec::new(),
    };
    let number = |flag: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or(format!("{flag} needs a value"))?;
        match v.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!("{flag}: '{v}' is not a positive number")),
        }
    };
    loop {
        let Some(arg) = it.next() else {
            return Err("nothing to run: give -c CODE, -m MODULE or FILE".into());
        };
        match arg.as_str() {
            "--interpreters" | "-n" => a.interpreters = number(&arg, it.next())?,
            "--threads-per-interpreter" => a.threads = number(&arg, it.next())?,
            "--python" => a.python = PythonSpec::parse(&it.next().ok_or("--python needs a value")?),
            "--venv" => a.venv = Some(it.next().ok_or("--venv needs a value")?.into()),
            "-h" | "--help" => return Err(String::new()),
            "-c" => {
                a.what = What::Code(it.next().ok_or("-c needs the code")?);
                break;
            }
            "-m" => {
                a.what = What::Module(it.next().ok_or("-m needs a module name")?);
                break;
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ => {
                a.what = What::File(arg.into());
                break;
            }
        }
    }
    a.args = it.collect();
    Ok(a)
}

/// Splits each interpreter's output into lines and prints them prefixed `[i] `, a whole
/// line at a time (partial lines wait for their end or for `flush`).
#[derive(Default)]
struct Prefixer {
    partial: Mutex<HashMap<(usize, bool), String>>,
}

impl Prefixer {
    fn write(&self, copy: usize, stream: Stream, text: &str) {
        let err = stream == Stream::Stderr;
        let mut partial = self.partial.lock().unwrap();
        let buf = partial.entry((copy, err)).or_default();
        buf.push_str(text);
        let mut out = String::new();
        while let Some(pos) = buf.find('\n') {
            out.push_str(&format!("[{copy}] {}\n", &buf[..pos]));
            buf.drain(..=pos);
        }
        drop(partial);
        if !out.is_empty() {
            if err {
                let _ = std::io::stderr().lock().write_all(out.as_bytes());
            } else {
                let _ = std::io::stdout().lock().write_all(out.as_bytes());
            }
        }
    }

    fn flush(&self) {
        let mut rest: Vec<((usize, bool), String)> = self.partial.lock().unwrap().drain().collect();
        rest.sort();
        for ((copy, err), text) in rest {
            if !text.is_empty() {
                let line = format!("[{copy}] {text}\n");
                if err {
                    let _ = std::io::stderr().lock().write_all(line.as_bytes());
                } else {
                    let _ = std::io::stdout().lock().write_all(line.as_bytes());
                }
            }
        }
    }
}

/// Runs the job in `interp` on its main thread (`main`) or on the calling thread.
fn run_one(interp: &Interpreter, what: &What, args: &[String], main: bool) -> Result<(), Error> {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    match (what, main) {
        (What::Code(c), true) => interp.run_on_main(c).map(drop),
        (What::Code(c), false) => interp.run(c).map(drop),
        (What::Module(m), true) => interp.run_module_on_main(m, &argv).map(drop),
        (What::Module(m), false) => interp.run_module(m, &argv).map(drop),
        (What::File(f), true) => interp.run_file_on_main(f).map(drop),
        (What::File(f), false) => interp.run_file(f).map(drop),
    }
}

fn main() -> ExitCode {
    tracing_subscriber_init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("multipy: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let n = args.interpreters;
    let prefixer = Arc::new(Prefixer::default());
    // sys.argv as python sets it: ['-c', ARGS...], [FILE, ARGS...]; run_module sets it
    // to [MODULE, ARGS...] itself.
    let argv: Vec<String> = match &args.what {
        What::Code(_) => std::iter::once("-c".to_string())
            .chain(args.args.clone())
            .collect(),
        What::Module(m) => std::iter::once(m.clone())
            .chain(args.args.clone())
            .collect(),
        What::File(f) => std::iter::once(f.display().to_string())
            .chain(args.args.clone())
            .collect(),
    };

    let started = Instant::now();
    let created: Vec<Result<Interpreter, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|copy| {
                let p = prefixer.clone();
                let mut config = Config::new().python(args.python.clone()).argv(argv.clone());
                config.venv = args.venv.clone();
                // The process's stdin goes to interpreter 0 (one reader at a time).
                config.inherit_stdin = copy == 0;
                config.forward = Some(Arc::new(move |_, st, t: &str| p.write(copy, st, t)));
                s.spawn(move || {
                    let i = Interpreter::new(config)?;
                    i.set_global("COPY", &copy.into())?;
                    i.set_global("NCOPIES", &n.into())?;
                    Ok(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let startup = started.elapsed().as_secs_f64();
    let mut interps = Vec::new();
    let mut failed = 0;
    for (copy, r) in created.into_iter().enumerate() {
        match r {
            Ok(i) => interps.push((copy, i)),
            Err(e) => {
                failed += 1;
                eprintln!("[{copy}] multipy: {e}");
            }
        }
    }

    let started = Instant::now();
    let results: Vec<(usize, Vec<Result<(), Error>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = interps
            .iter()
            .map(|(copy, interp)| {
                let (what, rest) = (&args.what, &args.args);
                let threads = args.threads;
                s.spawn(move || {
                    let results = std::thread::scope(|s2| {
                        // A python main thread's stack, so the same recursion depth works.
                        let hs: Vec<_> = (1..threads)
                            .map(|_| {
                                std::thread::Builder::new()
                                    .stack_size(multipy::main_stack_size())
                                    .spawn_scoped(s2, move || run_one(interp, what, rest, false))
                                    .expect("spawn a thread")
                            })
                            .collect();
                        let mut r = vec![run_one(interp, what, rest, true)];
                        r.extend(hs.into_iter().map(|h| h.join().unwrap()));
                        r
                    });
                    (*copy, results)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let run = started.elapsed().as_secs_f64();
    prefixer.flush();
    for (copy, rs) in &results {
        let mut ok = true;
        for r in rs {
            match r {
                Ok(()) | Err(Error::SystemExit { code: 0, .. }) => {}
                Err(Error::SystemExit { code, .. }) => {
                    ok = false;
                    eprintln!("[{copy}] SystemExit: {code}");
                }
                Err(Error::Exception(e)) => {
                    ok = false;
                    for line in e.traceback.lines() {
                        eprintln!("[{copy}] {line}");
                    }
                }
                Err(e) => {
                    ok = false;
                    eprintln!("[{copy}] multipy: {e}");
                }
            }
        }
        if !ok {
            failed += 1;
        }
    }
    // Finalise (atexit output is forwarded too), then the summary.
    drop(interps);
    prefixer.flush();
    // A closed stdout (`| head`) is not an error of the run.
    let _ = writeln!(
        std::io::stdout(),
        "multipy: {}/{n} interpreters ok, start-up {startup:.2} s, run {run:.2} s",
        n - failed
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Warnings (a copy kept mapped for daemon threads, a failed finalisation) always;
/// more with `RUST_LOG`.
fn tracing_subscriber_init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
