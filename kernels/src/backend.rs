//! Backend selection: `auto | cpu | wgpu | cuda:N`.

use std::fmt;
use std::str::FromStr;

use crate::probe::{CudaStatus, Inventory};
use crate::{Error, Result};

/// Where the operator asked MSM and NTT to run. Defaults to [`BackendChoice::Auto`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The fastest backend this machine offers (see [`resolve`]).
    #[default]
    Auto,
    /// The CPU reference (arkworks). Always available.
    Cpu,
    /// The first hardware GPU wgpu finds.
    Wgpu,
    /// CUDA device N (NVRTC-compiled kernels).
    Cuda(u32),
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendChoice::Auto => f.write_str("auto"),
            BackendChoice::Cpu => f.write_str("cpu"),
            BackendChoice::Wgpu => f.write_str("wgpu"),
            BackendChoice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for BackendChoice {
    type Err = Error;
    /// Parses `auto`, `cpu`, `wgpu`, `cuda` (device 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "wgpu" => Ok(BackendChoice::Wgpu),
            "cuda" => Ok(BackendChoice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(BackendChoice::Cuda)
                .ok_or_else(|| Error::BadBackend(s.to_owned())),
        }
    }
}

/// A concrete backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedBackend {
    /// The CPU reference.
    Cpu,
    /// A wgpu adapter, by its index in [`Inventory::wgpu`].
    Wgpu(usize),
    /// CUDA device N.
    Cuda(u32),
}

impl fmt::Display for ResolvedBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolvedBackend::Cpu => f.write_str("cpu"),
            ResolvedBackend::Wgpu(i) => write!(f, "wgpu adapter {i}"),
            ResolvedBackend::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The outcome of [`resolve`]: the backend and a sentence saying why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What will run.
    pub backend: ResolvedBackend,
    /// Why, for the log and `meshnode doctor`.
    pub reason: String,
}

/// Turns a choice into a backend this machine has.
///
/// `auto` takes CUDA device 0 when this build has the `cuda` feature and the driver and
/// NVRTC load (its operations then routed by size, [`crate::route::GpuFrom::measured`]),
/// else the CPU: wgpu, on an H200's Vulkan driver, was slower than our CPU backend at
/// every size measured (bench/RESULTS.md), and a software rasterizer such as lavapipe much
/// more so, so it runs only when asked for; the reason names a hardware adapter found. An
/// explicit choice that the machine cannot honour is an error, never a silent fallback.
///
/// # Errors
/// [`Error::Unavailable`] or [`Error::NotCompiled`] for an explicit choice that cannot run.
pub fn resolve(choice: BackendChoice, inv: &Inventory) -> Result<Resolved> {
    resolve_with(choice, inv, cfg!(feature = "cuda"))
}

/// [`resolve`] for a build with (`cuda_compiled`) or without the CUDA backend.
fn resolve_with(choice: BackendChoice, inv: &Inventory, cuda_compiled: bool) -> Result<Resolved> {
    // Kernels are compiled at run time, so CUDA counts only with NVRTC beside the driver.
    let (cuda_devices, cuda_missing) = match &inv.cuda {
        CudaStatus::Available {
            devices,
            nvrtc_version: Some(_),
            ..
        } => (devices.len() as u32, String::new()),
        CudaStatus::Available { .. } => (0, "the CUDA driver loads but NVRTC does not".into()),
        CudaStatus::Unavailable { reason } => (0, reason.clone()),
    };
    let hardware_gpu = inv
        .wgpu
        .as_ref()
        .ok()
        .and_then(|a| a.iter().position(|a| !a.is_software()));
    match choice {
        BackendChoice::Cpu => Ok(Resolved {
            backend: ResolvedBackend::Cpu,
            reason: "cpu was asked for".into(),
        }),
        BackendChoice::Cuda(_) if !cuda_compiled => Err(Error::NotCompiled {
            backend: "cuda",
            feature: "cuda",
        }),
        BackendChoice::Cuda(n) => {
            if n < cuda_devices {
                Ok(Resolved {
                    backend: ResolvedBackend::Cuda(n),
                    reason: format!("cuda:{n} was asked for"),
                })
            } else {
                Err(Error::Unavailable {
                    backend: format!("cuda:{n}"),
                    reason: if cuda_devices == 0 {
                        cuda_missing
                    } else {
                        format!("only {cuda_devices} CUDA device(s)")
                    },
                })
            }
        }
        BackendChoice::Wgpu => match &inv.wgpu {
            Err(e) => Err(e.clone()),
            Ok(adapters) if adapters.is_empty() => Err(Error::Unavailable {
                backend: "wgpu".into(),
                reason: "wgpu found no adapter (is a Vulkan driver installed?)".into(),
            }),
            Ok(adapters) => {
                let i = hardware_gpu.unwrap_or(0);
                Ok(Resolved {
                    backend: ResolvedBackend::Wgpu(i),
                    reason: format!("wgpu was asked for; using {}", adapters[i].name),
                })
            }
        },
        BackendChoice::Auto => {
            let no_cuda = if !cuda_compiled {
                "this build has no cuda feature".to_owned()
            } else if cuda_devices == 0 {
                format!("no CUDA ({cuda_missing})")
            } else {
                String::new()
            };
            Ok(if cuda_compiled && cuda_devices > 0 {
                Resolved {
                    backend: ResolvedBackend::Cuda(0),
                    reason: "auto: CUDA driver and NVRTC are loadable; using cuda:0 where it \
                             was measured faster than the CPU (MSMs from 2^14 points, NTTs \
                             from 2^17)"
                        .into(),
                }
            } else if let Some(i) = hardware_gpu {
                let name = &inv.wgpu.as_ref().expect("position came from Ok")[i].name;
                Resolved {
                    backend: ResolvedBackend::Cpu,
                    reason: format!(
                        "auto: {no_cuda}; wgpu adapter {name} found but not used (wgpu was \
                         measured slower than the CPU backend at every size; ask for \
                         `wgpu` to use it); using the CPU"
                    ),
                }
            } else {
                Resolved {
                    backend: ResolvedBackend::Cpu,
                    reason: format!(
                        "auto: {no_cuda} and no hardware GPU adapter (software adapters are \
                         used only when asked for); using the CPU"
                    ),
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::GpuAdapter;

    fn adapter(name: &str, device_type: &str) -> GpuAdapter {
        GpuAdapter {
            name: name.into(),
            backend: "vulkan".into(),
            device_type: device_type.into(),
            driver: String::new(),
            driver_info: String::new(),
            vendor: 0,
            device: 0,
        }
    }

    fn resolve_with_cuda(choice: BackendChoice, inv: &Inventory) -> Result<Resolved> {
        resolve_with(choice, inv, true)
    }

    #[test]
    fn a_build_without_cuda_never_picks_it() {
        let inv = inventory(vec![], 1);
        let r = resolve_with(BackendChoice::Auto, &inv, false).unwrap();
        assert_eq!(r.backend, ResolvedBackend::Cpu);
        assert!(r.reason.contains("no cuda feature"), "{}", r.reason);
        assert_eq!(
            resolve_with(BackendChoice::Cuda(0), &inv, false),
            Err(Error::NotCompiled {
                backend: "cuda",
                feature: "cuda"
            })
        );
    }

    fn inventory(adapters: Vec<GpuAdapter>, cuda: usize) -> Inventory {
        Inventory {
            cpu_threads: 2,
            wgpu: Ok(adapters),
            cuda: if cuda > 0 {
                CudaStatus::Available {
                    driver_version: 12040,
                    devices: vec!["test GPU".into(); cuda],
                    nvrtc_version: Some((12, 4)),
                }
            } else {
                CudaStatus::Unavailable {
                    reason: "libcuda.so.1 not found".into(),
                }
            },
        }
    }

    #[test]
    fn parses_and_prints_every_choice() {
        for s in ["auto", "cpu", "wgpu", "cuda:0", "cuda:3"] {
            assert_eq!(s.parse::<BackendChoice>().unwrap().to_string(), s);
        }
        assert_eq!(
            "cuda".parse::<BackendChoice>().unwrap(),
            BackendChoice::Cuda(0)
        );
        for bad in ["", "gpu", "cuda:", "cuda:x", "CPU"] {
            assert!(bad.parse::<BackendChoice>().is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_takes_cuda_else_the_cpu_and_names_a_wgpu_adapter_it_leaves_alone() {
        let lavapipe = adapter("llvmpipe (LLVM 15.0.6, 256 bits)", "Cpu");
        let gpu = adapter("NVIDIA H200", "DiscreteGpu");
        let r = resolve_with_cuda(BackendChoice::Auto, &inventory(vec![gpu.clone()], 1)).unwrap();
        assert_eq!(r.backend, ResolvedBackend::Cuda(0));
        let r = resolve(
            BackendChoice::Auto,
            &inventory(vec![lavapipe.clone(), gpu.clone()], 0),
        )
        .unwrap();
        assert_eq!(r.backend, ResolvedBackend::Cpu);
        assert!(
            r.reason.contains("NVIDIA H200") && r.reason.contains("`wgpu`"),
            "{}",
            r.reason
        );
        // asked for, the hardware adapter is taken before the software one
        let r = resolve(
            BackendChoice::Wgpu,
            &inventory(vec![lavapipe.clone(), gpu], 0),
        )
        .unwrap();
        assert_eq!(r.backend, ResolvedBackend::Wgpu(1));
        let r =
            resolve_with_cuda(BackendChoice::Auto, &inventory(vec![lavapipe.clone()], 0)).unwrap();
        assert_eq!(r.backend, ResolvedBackend::Cpu);
        // Asked for explicitly, the software adapter is used.
        let r = resolve_with_cuda(BackendChoice::Wgpu, &inventory(vec![lavapipe], 0)).unwrap();
        assert_eq!(r.backend, ResolvedBackend::Wgpu(0));
    }

    #[test]
    fn explicit_choice_that_cannot_run_is_an_error() {
        let inv = inventory(vec![], 0);
        assert!(matches!(
            resolve_with_cuda(BackendChoice::Cuda(0), &inv),
            Err(Error::Unavailable { .. })
        ));
        assert!(matches!(
            resolve_with_cuda(BackendChoice::Wgpu, &inv),
            Err(Error::Unavailable { .. })
        ));
        let mut inv = inventory(vec![], 1);
        assert!(resolve_with_cuda(BackendChoice::Cuda(1), &inv).is_err());
        assert!(resolve_with_cuda(BackendChoice::Cuda(0), &inv).is_ok());
        // A driver without NVRTC cannot compile kernels: not usable, and auto skips it.
        if let CudaStatus::Available { nvrtc_version, .. } = &mut inv.cuda {
            *nvrtc_version = None;
        }
        assert!(resolve_with_cuda(BackendChoice::Cuda(0), &inv).is_err());
        assert_eq!(
            resolve_with_cuda(BackendChoice::Auto, &inv)
                .unwrap()
                .backend,
            ResolvedBackend::Cpu
        );
    }
}
