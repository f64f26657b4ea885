//! WASI jobs on a real wasmtime: a module reads its input and writes its result; fuel,
//! memory and time limits end runaway guests with the right status; a guest cannot reach
//! outside its preopens or see the host's clock, randomness or environment; the runtime
//! keeps serving after every failure.

use std::time::Duration;

use fleetmesh_wasi::{Error, Job, Limits, Runtime, RuntimeConfig, Status};

const IMPORTS: &str = r#"
  (import "wasi_snapshot_preview1" "path_open"
    (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env (param i32 i32) (result i32)))
"#;

/// A module: `IMPORTS`, one page of memory, data, and a `_start` body.
fn module(data: &str, body: &str) -> String {
    format!(
        "(module {IMPORTS} (memory (export \"memory\") 1) {data} (func (export \"_start\") (local $err i32) (local $fd i32) (local $n i32) (local $i i32) {body}))"
    )
}

/// Reads /inputs/in.txt, upper-cases it, writes /outputs/out.txt and stdout. Exit code
/// 40 + errno when a file does not open (WASI exit codes stop at 125).
fn upper() -> String {
    module(
        r#"(data (i32.const 0) "in.txt") (data (i32.const 16) "out.txt")"#,
        r#"
        (local.set $err (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 6)
            (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 300)))
        (if (local.get $err) (then (call $exit (i32.add (i32.const 40) (local.get $err)))))
        (local.set $fd (i32.load (i32.const 300)))
        (i32.store (i32.const 100) (i32.const 1024))
        (i32.store (i32.const 104) (i32.const 4096))
        (drop (call $read (local.get $fd) (i32.const 100) (i32.const 1) (i32.const 200)))
        (local.set $n (i32.load (i32.const 200)))
        (loop $l (if (i32.lt_u (local.get $i) (local.get $n)) (then
          (if (i32.and
                (i32.ge_u (i32.load8_u (i32.add (i32.const 1024) (local.get $i))) (i32.const 97))
                (i32.le_u (i32.load8_u (i32.add (i32.const 1024) (local.get $i))) (i32.const 122)))
            (then (i32.store8 (i32.add (i32.const 1024) (local.get $i))
              (i32.sub (i32.load8_u (i32.add (i32.const 1024) (local.get $i))) (i32.const 32)))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $l))))
        (local.set $err (call $open (i32.const 4) (i32.const 0) (i32.const 16) (i32.const 7)
            (i32.const 9) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 300)))
        (if (local.get $err) (then (call $exit (i32.add (i32.const 40) (local.get $err)))))
        (i32.store (i32.const 104) (local.get $n))
        (drop (call $write (i32.load (i32.const 300)) (i32.const 100) (i32.const 1) (i32.const 200)))
        (drop (call $write (i32.const 1) (i32.const 100) (i32.const 1) (i32.const 200)))
        "#,
    )
}

/// Tries to open `path` relative to preopen fd `dir` (flags `oflags`, rights `rights`);
/// exits with 40 + errno on failure, 0 when it opened.
fn open_only(dir: i32, path: &str, oflags: i32, rights: i64) -> String {
    module(
        &format!(r#"(data (i32.const 0) "{path}")"#),
        &format!(
            r#"(local.set $err (call $open (i32.const {dir}) (i32.const 0) (i32.const 0)
                 (i32.const {}) (i32.const {oflags}) (i64.const {rights}) (i64.const 0)
                 (i32.const 0) (i32.const 300)))
               (if (local.get $err) (then (call $exit (i32.add (i32.const 40) (local.get $err)))))"#,
            path.len()
        ),
    )
}

fn rt() -> Runtime {
    Runtime::new(&RuntimeConfig::default()).unwrap()
}

fn run(rt: &Runtime, wat: &str, job: &Job) -> fleetmesh_wasi::Outcome {
    let m = rt.compile(wat.as_bytes()).unwrap();
    rt.run(&m, job).unwrap()
}

#[test]
fn a_job_reads_its_input_and_writes_its_result_with_a_reproducible_fuel_count() {
    let rt = rt();
    let (inputs, outputs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(inputs.path().join("in.txt"), "hello, fleetmesh").unwrap();
    let job = Job {
        inputs: Some(inputs.path().into()),
        outputs: Some(outputs.path().into()),
        ..Job::default()
    };
    let a = run(&rt, &upper(), &job);
    assert_eq!(
        a.status,
        Status::Exited(0),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert_eq!(a.stdout, b"HELLO, FLEETMESH");
    assert_eq!(
        std::fs::read(outputs.path().join("out.txt")).unwrap(),
        b"HELLO, FLEETMESH"
    );
    assert!(a.fuel_used > 100, "{}", a.fuel_used);
    let b = run(&rt, &upper(), &job);
    assert_eq!(b.fuel_used, a.fuel_used, "fuel is deterministic");
    // a longer input costs more fuel
    std::fs::write(inputs.path().join("in.txt"), "hello, fleetmesh, and more").unwrap();
    assert!(run(&rt, &upper(), &job).fuel_used > a.fuel_used);
}

#[test]
fn runaway_guests_end_with_their_reason_and_the_runtime_keeps_serving() {
    let rt = rt();
    let spin = "(module (func (export \"_start\") (loop $l (br $l))))";
    let out = run(
        &rt,
        spin,
        &Job {
            limits: Limits {
                fuel: 1_000_000,
                ..Limits::default()
            },
            ..Job::default()
        },
    );
    assert_eq!(out.status, Status::OutOfFuel);
    assert_eq!(out.fuel_used, 1_000_000);
    // with fuel to spare, the wall clock stops it
    let long = Limits {
        fuel: u64::MAX / 2,
        wall: Duration::from_millis(200),
        ..Limits::default()
    };
    let out = run(
        &rt,
        spin,
        &Job {
            limits: long,
            ..Job::default()
        },
    );
    assert_eq!(out.status, Status::Timeout);
    // memory: growing within the limit works, past it ends the job
    let grow = |pages: u32| {
        format!(
            "(module (memory 1) (func (export \"_start\") (if (i32.eq (memory.grow (i32.const {pages})) (i32.const -1)) (then unreachable))))"
        )
    };
    assert_eq!(
        run(&rt, &grow(100), &Job::default()).status,
        Status::Exited(0)
    );
    let small = Job {
        limits: Limits {
            memory: 1 << 20,
            ..Limits::default()
        },
        ..Job::default()
    };
    assert_eq!(run(&rt, &grow(100), &small).status, Status::OutOfMemory);
    // a module that declares more memory than the limit does not start
    let big = "(module (memory 64) (func (export \"_start\")))";
    assert_eq!(run(&rt, big, &small).status, Status::OutOfMemory);
    // traps, exit codes, too much output
    let trap = run(
        &rt,
        "(module (func (export \"_start\") unreachable))",
        &Job::default(),
    );
    assert!(
        matches!(&trap.status, Status::Trap(m) if m.contains("unreachable")),
        "{:?}",
        trap.status
    );
    let exit7 = module("", "(call $exit (i32.const 7))");
    assert_eq!(run(&rt, &exit7, &Job::default()).status, Status::Exited(7));
    let chatty = module(
        r#"(data (i32.const 0) "0123456789")"#,
        r#"(i32.store (i32.const 100) (i32.const 0)) (i32.store (i32.const 104) (i32.const 10))
           (loop $l
             (if (call $write (i32.const 1) (i32.const 100) (i32.const 1) (i32.const 200))
               (then (call $exit (i32.const 9))))
             (br $l))"#,
    );
    // past the output cap, writing fails (or traps); the host keeps at most the cap
    let capped = Job {
        limits: Limits {
            output: 1000,
            wall: Duration::from_secs(5),
            ..Limits::default()
        },
        ..Job::default()
    };
    let out = run(&rt, &chatty, &capped);
    assert!(
        matches!(out.status, Status::Exited(9) | Status::Trap(_)),
        "{:?}",
        out.status
    );
    assert_eq!(out.stdout.len(), 1000);
    // bad modules are errors before anything runs
    assert!(matches!(rt.compile(b"\0asm junk"), Err(Error::Module(_))));
    let no_start = rt.compile(b"(module)").unwrap();
    assert!(matches!(
        rt.run(&no_start, &Job::default()),
        Err(Error::Module(_))
    ));
    let foreign = rt
        .compile(br#"(module (import "env" "open_socket" (func)) (func (export "_start")))"#)
        .unwrap();
    let e = rt.run(&foreign, &Job::default()).unwrap_err();
    assert!(e.to_string().contains("open_socket"), "{e}");
    // and after all that, a good job still runs
    assert_eq!(run(&rt, &exit7, &Job::default()).status, Status::Exited(7));
}

#[test]
fn a_guest_has_no_ambient_authority() {
    let rt = rt();
    let root = tempfile::tempdir().unwrap();
    let (inputs, outputs) = (root.path().join("in"), root.path().join("out"));
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::create_dir_all(&outputs).unwrap();
    std::fs::write(root.path().join("secret.txt"), "host secret").unwrap();
    std::fs::write(inputs.join("in.txt"), "ok").unwrap();
    let job = Job {
        inputs: Some(inputs.clone()),
        outputs: Some(outputs.clone()),
        ..Job::default()
    };
    let refused = |wat: &str| match run(&rt, wat, &job).status {
        Status::Exited(c) if c > 40 => c - 40,
        other => panic!("expected a refused open, got {other:?}"),
    };
    // outside the preopen by `..`, by an absolute path, through a symlink
    refused(&open_only(3, "../secret.txt", 0, 2));
    refused(&open_only(3, "/etc/passwd", 0, 2));
    std::os::unix::fs::symlink(root.path().join("secret.txt"), inputs.join("link")).unwrap();
    refused(&open_only(3, "link", 0, 2));
    // the inputs are read-only: no new file, no writing
    refused(&open_only(3, "new.txt", 1, 64));
    assert!(!inputs.join("new.txt").exists());
    refused(&open_only(3, "in.txt", 0, 64));
    // no preopen at all: fd 3 is not a directory the guest holds
    let bare = run(&rt, &open_only(3, "in.txt", 0, 2), &Job::default());
    assert!(
        matches!(bare.status, Status::Exited(c) if c > 40),
        "{:?}",
        bare.status
    );
    // what works: the input read-only, the output writable
    assert_eq!(
        run(&rt, &open_only(3, "in.txt", 0, 2), &job).status,
        Status::Exited(0)
    );
    assert_eq!(
        run(&rt, &open_only(4, "made.txt", 1, 64), &job).status,
        Status::Exited(0)
    );
    assert!(outputs.join("made.txt").exists());

    // clocks fixed at 0, randomness from a fixed seed, no environment
    let probe = module(
        "",
        r#"(drop (call $clock (i32.const 0) (i64.const 1) (i32.const 0)))
           (drop (call $clock (i32.const 1) (i64.const 1) (i32.const 8)))
           (drop (call $random (i32.const 16) (i32.const 16)))
           (drop (call $env (i32.const 32) (i32.const 36)))
           (i32.store (i32.const 100) (i32.const 0)) (i32.store (i32.const 104) (i32.const 40))
           (drop (call $write (i32.const 1) (i32.const 100) (i32.const 1) (i32.const 200)))"#,
    );
    // (this process has PATH and more; the guest sees none of it)
    assert!(std::env::vars().count() > 0);
    let a = run(&rt, &probe, &Job::default());
    let b = run(&rt, &probe, &Job::default());
    assert_eq!(a.status, Status::Exited(0));
    assert_eq!(&a.stdout[..16], &[0u8; 16], "both clocks read 0");
    assert_eq!(a.stdout, b.stdout, "the same random bytes every run");
    assert_ne!(&a.stdout[16..32], &[0u8; 16]);
    assert_eq!(&a.stdout[32..40], &[0u8; 8], "no environment variables");
}
