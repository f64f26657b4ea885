//! `meshnode wasi run`: one WASI job from the command line, under the same runtime and
//! limits the node's job executor uses.

use anyhow::Context as _;
use fleetmesh_wasi::{Job, Limits, Runtime, RuntimeConfig};
use serde_json::json;

use crate::cli::Outcome;
use crate::cli::WasiRunArgs;

/// Runs the module and prints its outcome.
pub fn run(a: &WasiRunArgs) -> anyhow::Result<Outcome> {
    let bytes =
        std::fs::read(&a.module).with_context(|| format!("reading {}", a.module.display()))?;
    let rt = Runtime::new(&RuntimeConfig::default())?;
    let module = match rt.compile(&bytes) {
        Ok(m) => m,
        Err(e) => {
            println!("{}", json!({"error": e.to_string(), "code": "bad_module"}));
            return Ok(Outcome::Malformed);
        }
    };
    let stdin = match &a.stdin {
        Some(p) => std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        None => Vec::new(),
    };
    let job = Job {
        args: a.args.clone(),
        stdin,
        inputs: a.input.clone(),
        outputs: a.output.clone(),
        limits: Limits {
            fuel: a.fuel,
            memory: a.memory_mib << 20,
            wall: std::time::Duration::from_secs(a.timeout.max(1)),
            ..Limits::default()
        },
    };
    let out = match rt.run(&module, &job) {
        Ok(o) => o,
        Err(e) => {
            println!("{}", json!({"error": e.to_string(), "code": "bad_module"}));
            return Ok(Outcome::Malformed);
        }
    };
    let exit_code = match out.status {
        fleetmesh_wasi::Status::Exited(c) => Some(c),
        _ => None,
    };
    let reason = match &out.status {
        fleetmesh_wasi::Status::Trap(m) => Some(m.clone()),
        _ => None,
    };
    println!(
        "{}",
        json!({
            "status": out.status.code(),
            "exit_code": exit_code,
            "reason": reason,
            "fuel_used": out.fuel_used,
            "wall_ms": out.wall.as_secs_f64() * 1e3,
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
        })
    );
    Ok(if out.status.success() {
        Outcome::Ok
    } else {
        Outcome::Negative
    })
}
