//! `troubadour-bench <workload> --impl <name> [--quick] [--json] [--threads N] [--timeout-s S]`
//! runs one workload on one implementation, once, in this process, and
//! prints one line: with `--json` exactly one JSON object
//!
//! ```text
//! {"workload":..,"impl":..,"ok":true|false,"elapsed_ms":..,"msgs_per_sec":..|null,
//!  "peak_rss_bytes":..,"bytes_per_actor":..|null[,"bytes_per_message":..,"fill_ms":..][,"error":".."]}
//! ```
//!
//! `troubadour-bench list` prints the implementation names, one a line.
//! The exit status is 0 when the run was ok, 1 when it was not, 2 on bad
//! usage, 3 when it ran past its time limit.

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod cluster;
mod impls;
mod measure;
mod persist;
// The test suite's PostgreSQL server (initdb and pg_ctl in a temporary
// directory, as the `postgres` user), shared rather than written twice.
#[path = "../../crates/troubadour-cluster/tests/postgres/mod.rs"]
mod postgres;
mod remote;
mod workload;

use workload::{Failure, Figures, Sizes, Workload};

#[global_allocator]
static ALLOCATOR: measure::SystemAllocator = measure::SystemAllocator;

const USAGE: &str = "usage: troubadour-bench <workload> --impl <name> [--quick] [--json] [--threads N] [--timeout-s S]
       troubadour-bench list
workloads: counting pingpong skynet fanin rings rings-hops idle direct pi pi-long backlog
           remote-pingpong remote-pi [--pairs N] [--size BYTES] [--plaintext] [--rtt-only] (two processes)
           cluster-virtual failover [--mode kill|leave] [--plaintext] (three processes; PostgreSQL)
           persist --store sqlite|postgres [--dir D] (event-sourced actors, group commit, floor beside)";

struct Args {
    workload: Workload,
    implementation: String,
    quick: bool,
    json: bool,
    threads: usize,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut argv = std::env::args().skip(1);
    let mut workload = None;
    let mut implementation = None;
    let mut quick = false;
    let mut json = false;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut timeout = None;
    while let Some(arg) = argv.next() {
        let mut value = |flag: &str| argv.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--impl" => implementation = Some(value("--impl")?),
            "--quick" => quick = true,
            "--json" => json = true,
            "--threads" => {
                threads = value("--threads")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("--threads needs a positive number")?
            }
            "--timeout-s" => {
                let secs: u64 = value("--timeout-s")?
                    .parse()
                    .map_err(|_| "--timeout-s needs a number of seconds")?;
                timeout = Some(Duration::from_secs(secs));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            name if workload.is_none() => {
                workload =
                    Some(Workload::parse(name).ok_or_else(|| format!("unknown workload {name}"))?)
            }
            extra => return Err(format!("unexpected argument {extra}")),
        }
    }
    Ok(Args {
        workload: workload.ok_or("no workload given")?,
        implementation: implementation.ok_or("no --impl given")?,
        quick,
        json,
        threads,
        timeout: timeout.unwrap_or(Duration::from_secs(if quick { 120 } else { 900 })),
    })
}

/// Set by whoever prints the result line first: the run or the watchdog.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// Prints the one result line, unless it was printed already.
fn report(args: &Args, result: &Result<Figures, Failure>) -> bool {
    if REPORTED.swap(true, Ordering::SeqCst) {
        return false;
    }
    let line = if args.json {
        json_line(args, result)
    } else {
        text_line(args, result)
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    true
}

fn json_line(args: &Args, result: &Result<Figures, Failure>) -> String {
    let num = |v: Option<f64>| {
        v.filter(|v| v.is_finite())
            .map_or("null".to_string(), |v| format!("{v:.3}"))
    };
    let int = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    let peak = int(measure::peak_rss_bytes());
    let head = format!(
        "\"workload\":{},\"impl\":{}",
        json_string(args.workload.name()),
        json_string(&args.implementation)
    );
    match result {
        Ok(f) => {
            // The backlog's two extra figures, only where it has them.
            let backlog = match (f.bytes_per_message, f.fill) {
                (bytes, Some(fill)) => format!(
                    ",\"bytes_per_message\":{},\"fill_ms\":{}",
                    num(bytes),
                    num(Some(fill.as_secs_f64() * 1e3))
                ),
                _ => String::new(),
            };
            format!(
                "{{{head},\"ok\":true,\"elapsed_ms\":{},\"msgs_per_sec\":{},\"peak_rss_bytes\":{peak},\"bytes_per_actor\":{}{backlog}}}",
                num(Some(f.elapsed.as_secs_f64() * 1e3)),
                num(msgs_per_sec(f)),
                num(f.bytes_per_actor),
            )
        }
        Err(e) => format!(
            "{{{head},\"ok\":false,\"elapsed_ms\":null,\"msgs_per_sec\":null,\"peak_rss_bytes\":{peak},\"bytes_per_actor\":null,\"error\":{}}}",
            json_string(&e.to_string())
        ),
    }
}

fn text_line(args: &Args, result: &Result<Figures, Failure>) -> String {
    let what = format!("{} / {}", args.workload, args.implementation);
    let peak = measure::peak_rss_bytes()
        .map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0));
    match result {
        Ok(f) => {
            let mut line = format!("{what}: ok, {:.1} ms", f.elapsed.as_secs_f64() * 1e3);
            if let Some(rate) = msgs_per_sec(f) {
                line += &format!(", {:.2} M msg/s", rate / 1e6);
            }
            if let Some(b) = f.bytes_per_actor {
                line += &format!(", {b:.0} B/actor");
            }
            if let Some(fill) = f.fill {
                line += &format!(
                    " (fill {:.1} ms, drain {:.1} ms)",
                    fill.as_secs_f64() * 1e3,
                    f.elapsed.saturating_sub(fill).as_secs_f64() * 1e3
                );
            }
            if let Some(b) = f.bytes_per_message {
                line += &format!(", {b:.1} B/message queued");
            }
            line + &format!(", peak RSS {peak}")
        }
        Err(e) => format!("{what}: FAILED: {e}"),
    }
}

fn msgs_per_sec(f: &Figures) -> Option<f64> {
    f.messages.map(|m| m as f64 / f.elapsed.as_secs_f64())
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-text panic payload)".into())
}

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().skip(1).collect();
    if matches!(
        all.first().map(String::as_str),
        Some("remote-pingpong" | "remote-pi" | "__remote-peer")
    ) {
        return remote::main(all);
    }
    if matches!(
        all.first().map(String::as_str),
        Some("cluster-virtual" | "failover" | "__cluster-node")
    ) {
        return cluster::main(all);
    }
    if all.first().map(String::as_str) == Some("persist") {
        return persist::main(all);
    }
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("list") {
        for name in impls::names() {
            println!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let Some(contender) = impls::contender(&args.implementation, args.threads) else {
        eprintln!(
            "unknown implementation {}; known: {}",
            args.implementation,
            impls::names().collect::<Vec<_>>().join(" ")
        );
        return ExitCode::from(2);
    };
    let args = std::sync::Arc::new(args);

    // A run that hangs (a lost message, a panicked actor) still gets its one
    // line, saying so, instead of no figure at all.
    let watched = args.clone();
    std::thread::spawn(move || {
        std::thread::sleep(watched.timeout);
        let why = format!("timed out after {} s", watched.timeout.as_secs());
        if report(&watched, &Err(Failure::Failed(why))) {
            std::process::exit(3);
        }
    });

    let sizes = Sizes::new(args.quick, args.threads);
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        workload::run(args.workload, &sizes, contender.as_ref())
    }))
    .unwrap_or_else(|payload| {
        Err(Failure::Failed(format!(
            "panicked: {}",
            panic_text(payload)
        )))
    });
    let ok = result.is_ok();
    report(&args, &result);
    // Leave without tearing down runtimes and leftover actors: nothing is
    // measured any more, and a million actors take a while to drop.
    std::process::exit(if ok { 0 } else { 1 });
}
