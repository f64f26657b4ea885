//! `meshnode wasi run`: a module's outcome as one JSON line and an exit code.

use super::*;

const HELLO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hi from wasi\n")
  (func (export "_start")
    (i32.store (i32.const 100) (i32.const 0))
    (i32.store (i32.const 104) (i32.const 13))
    (drop (call $write (i32.const 1) (i32.const 100) (i32.const 1) (i32.const 200)))))"#;

#[test]
fn wasi_run_reports_the_outcome_and_exits_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let hello = dir.path().join("hello.wat");
    std::fs::write(&hello, HELLO).unwrap();
    let o = run(&["wasi", "run", hello.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], "exited");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["stdout"], "hi from wasi\n");
    assert!(v["fuel_used"].as_u64().unwrap() > 0);
    // a limit hit is a failed job: exit 1 with the reason
    let spin = dir.path().join("spin.wat");
    std::fs::write(
        &spin,
        "(module (func (export \"_start\") (loop $l (br $l))))",
    )
    .unwrap();
    let o = run(&["wasi", "run", spin.to_str().unwrap(), "--fuel", "5000"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], "out-of-fuel");
    assert_eq!(v["fuel_used"], 5000);
    // not a module, or not a WASI command: exit 2
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0garbage").unwrap();
    let empty = dir.path().join("empty.wat");
    std::fs::write(&empty, "(module)").unwrap();
    for m in [&junk, &empty] {
        let o = run(&["wasi", "run", m.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["code"], "bad_module");
    }
}
