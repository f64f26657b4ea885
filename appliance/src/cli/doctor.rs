//! `meshnode doctor`: what this box offers and who the node is.

use std::path::Path;

use fleetmesh_kernels::route::GpuFrom;
use fleetmesh_kernels::{BackendChoice, CudaStatus, probe, resolve};
use fleetmesh_schemas::SchemaSet;
use serde_json::{Value, json};

use crate::node::{self, Node};

/// Features compiled into this build.
pub fn features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "wgpu") {
        f.push("wgpu");
    }
    if cfg!(feature = "cuda") {
        f.push("cuda");
    }
    if cfg!(feature = "cuda-inference") {
        f.push("cuda-inference");
    }
    f
}

/// Where inference runs for the node's `[inference] device` (`auto` without a node) and
/// why, and the CUDA libraries it would open (a build with `cuda-inference`).
fn inference_report(choice: &str) -> Value {
    let libraries: serde_json::Map<String, Value> = fleetmesh_inference::model::cuda_libraries()
        .into_iter()
        .map(|(name, path)| (name.to_owned(), json!(path)))
        .collect();
    let place = match fleetmesh_inference::model::place(choice) {
        Ok(p) => json!({
            "device": if p.device.is_cuda() {
                format!("cuda:{}", fleetmesh_inference::model::gpu_index(&p.device).unwrap_or(0))
            } else {
                "cpu".into()
            },
            "reason": p.reason,
        }),
        Err(e) => json!({"error": e.to_string()}),
    };
    let mut r = json!({"choice": choice, "cuda_libraries": libraries});
    if let (Some(r), Value::Object(p)) = (r.as_object_mut(), place) {
        r.extend(p);
    }
    r
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

/// `meshnode doctor`: the report on this machine (and the node in `--dir` or the home, when
/// there is one), as text or `--json`.
pub fn run(args: &crate::cli::DoctorArgs) -> anyhow::Result<crate::cli::Outcome> {
    let dir = match &args.dir {
        Some(d) => Some(d.clone()),
        None => node::default_home().ok().filter(|d| node::exists(d)),
    };
    let report = report(dir.as_deref(), args.backend)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(crate::cli::Outcome::Ok)
}

/// Gathers the report. `dir` is reported on when it holds a node.
pub fn report(dir: Option<&Path>, choice: BackendChoice) -> anyhow::Result<Value> {
    let inventory = probe::probe();
    let (resolved, prover) = match resolve(choice, &inventory) {
        Ok(r) => {
            // Where each of the prover's operations runs on that backend: `auto` routes by
            // the sizes measured to pay (fleetmesh_kernels::route), and a GPU backend leaves
            // G2 MSMs below its own threshold to the CPU; opening the device and compiling
            // its kernels is left to the prover.
            let device = r.backend.to_string();
            let from = GpuFrom::for_choice(choice, &r.backend);
            let prover: serde_json::Map<String, Value> = from
                .placement(&device)
                .into_iter()
                .map(|(op, place)| (op.to_owned(), Value::from(place)))
                .collect();
            let prover = Value::Object(prover);
            (
                json!({"choice": choice.to_string(), "backend": device, "reason": r.reason}),
                prover,
            )
        }
        Err(e) => (
            json!({"choice": choice.to_string(), "error": e.to_string()}),
            json!({"error": e.to_string()}),
        ),
    };
    // the MSM tables' budget: the node's `[compute] precompute_mib`, else the default
    let mut tables_mib = crate::config::ComputeSection::default().precompute_mib;
    let mut inference_device = "auto".to_owned();
    let node = match dir {
        Some(dir) if node::exists(dir) => {
            let node = Node::open(dir)?;
            tables_mib = node.config.compute.precompute_mib;
            inference_device = node.config.inference.device.clone();
            let descriptor = node.store.latest_event(
                &node.keys.nostr_pubkey(),
                fleetmesh_schemas::constants::kind::NODE_DESCRIPTOR,
            )?;
            json!({
                "dir": dir.display().to_string(),
                "pubkey": node.keys.nostr_pubkey_hex(),
                "did": node.keys.did(),
                "class": node.config.node.class,
                "descriptor": descriptor.map(|e| e.id_hex()),
                "events": fleetmesh_relay::store::EventStore::event_count(&node.store)?,
            })
        }
        Some(dir) => json!({"dir": dir.display().to_string(), "error": "no node here"}),
        None => Value::Null,
    };
    let mut prover = prover;
    if prover.get("error").is_none() {
        // only the CPU MSM uses precomputed tables (all MSMs, or those below a threshold)
        let on_cpu = prover["msm_g1"]
            .as_str()
            .is_some_and(|p| p == "cpu" || p.ends_with("cpu below"));
        prover["tables_mib"] = json!(if on_cpu { tables_mib } else { 0 });
        // the CPU MSM's field arithmetic (CUDA's G2 MSMs and small ones on wgpu run there too)
        prover["cpu_msm_arithmetic"] = json!(cpu_msm_arithmetic());
    }
    Ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "features": features(),
        "cpu": {"threads": inventory.cpu_threads, "model": cpu_model()},
        "gpu": inventory,
        "backend": resolved,
        "prover": prover,
        "inference": inference_report(&inference_device),
        "protocol_digest": SchemaSet::embedded().digest().to_hex(),
        "node": node,
    }))
}

/// Renders the report as text.
pub fn render(r: &Value) -> String {
    let mut out = String::new();
    let s = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    };
    out += &format!(
        "meshnode {} (features: {})\n",
        s(&r["version"]),
        r["features"]
            .as_array()
            .map(|f| f.iter().map(s).collect::<Vec<_>>().join(", "))
            .filter(|f| !f.is_empty())
            .unwrap_or_else(|| "none".into())
    );
    out += &format!(
        "cpu:      {} threads{}\n",
        r["cpu"]["threads"],
        r["cpu"]["model"]
            .as_str()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    );
    let wgpu = &r["gpu"]["wgpu"];
    match wgpu["adapters"].as_array() {
        Some(adapters) => {
            out += &format!("wgpu:     {} adapter(s)\n", adapters.len());
            for (i, a) in adapters.iter().enumerate() {
                out += &format!(
                    "  [{i}] {} ({}, {}, driver {} {})\n",
                    s(&a["name"]),
                    s(&a["backend"]),
                    s(&a["device_type"]),
                    s(&a["driver"]),
                    s(&a["driver_info"])
                );
            }
        }
        None => out += &format!("wgpu:     unavailable: {}\n", s(&wgpu["error"])),
    }
    let cuda: Option<CudaStatus> = serde_json::from_value(r["gpu"]["cuda"].clone()).ok();
    out += &match cuda {
        Some(CudaStatus::Available {
            driver_version,
            devices,
            nvrtc_version,
        }) => format!(
            "cuda:     driver {}.{}, {} device(s): {}; nvrtc {}\n",
            driver_version / 1000,
            (driver_version % 1000) / 10,
            devices.len(),
            devices.join(", "),
            nvrtc_version.map_or("not found".into(), |(a, b)| format!("{a}.{b}"))
        ),
        Some(CudaStatus::Unavailable { reason }) => format!("cuda:     unavailable: {reason}\n"),
        None => "cuda:     unknown\n".into(),
    };
    let b = &r["backend"];
    out += &match b.get("error") {
        Some(e) => format!("backend:  {}: {}\n", s(&b["choice"]), s(e)),
        None => format!(
            "backend:  {} -> {} ({})\n",
            s(&b["choice"]),
            s(&b["backend"]),
            s(&b["reason"])
        ),
    };
    let p = &r["prover"];
    out += &match p.get("error") {
        Some(e) => format!("prover:   {}\n", s(e)),
        None => format!(
            "prover:   NTT on {}, G1 MSM on {}, G2 MSM on {}, batch-verify weights on {}; MSM \
             tables {}; CPU MSM in {}\n",
            s(&p["ntt"]),
            s(&p["msm_g1"]),
            s(&p["msm_g2"]),
            s(&p["verify"]),
            match p["tables_mib"].as_u64() {
                Some(0) | None => "off".to_owned(),
                Some(m) => format!("up to {m} MiB ([compute] precompute_mib)"),
            },
            match p["cpu_msm_arithmetic"].as_str() {
                Some("avx512ifma") => "AVX-512 IFMA lanes",
                _ => "scalar arithmetic",
            }
        ),
    };
    let i = &r["inference"];
    out += &match i.get("error") {
        Some(e) => format!("inference: {}: {}\n", s(&i["choice"]), s(e)),
        None => format!("inference: {} ({})\n", s(&i["device"]), s(&i["reason"])),
    };
    if let Some(libs) = i["cuda_libraries"].as_object().filter(|l| !l.is_empty()) {
        let list: Vec<String> = libs
            .iter()
            .map(|(name, path)| match path.as_str() {
                Some(p) => format!("{name} {p}"),
                None => format!("{name} not found"),
            })
            .collect();
        out += &format!("  cuda libraries: {}\n", list.join(", "));
    }
    out += &format!("protocol digest: {}\n", s(&r["protocol_digest"]));
    let n = &r["node"];
    if let Some(e) = n.get("error") {
        out += &format!("node:     {}: {}\n", s(&n["dir"]), s(e));
    } else if !n.is_null() {
        out += &format!("node:     {} ({})\n", s(&n["pubkey"]), s(&n["dir"]));
        out += &format!("did:      {}\n", s(&n["did"]));
        out += &format!("class:    {}\n", s(&n["class"]));
    }
    out
}

/// `avx512ifma` where the CPU MSM adds in AVX-512 IFMA lanes, else `scalar`.
fn cpu_msm_arithmetic() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if fleetmesh_kernels::ifma::active() {
        return "avx512ifma";
    }
    "scalar"
}
