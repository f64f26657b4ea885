//! Where a model runs: the device named in config or on the command line (`auto`, `cpu`,
//! `cuda:N`), why (`meshnode doctor`), whether a model fits in it, and how executors and
//! evidence name it. Re-exported from [`crate::model`].
//!
//! A build with the `cuda` feature opens NVIDIA's libraries when first asked (cudarc's
//! dynamic loading): the driver (`libcuda.so.1`, from the host or the NVIDIA container
//! toolkit) and the CUDA libraries candle opens with a device (cuBLAS, cuBLASLt, cuRAND,
//! shipped in the OCI image). Each is looked for before candle is asked for the device, so
//! a machine without them gets a reason, never the panic cudarc raises on a missing library.

use candle_core::Device;

use crate::error::{Error, Result};

/// A device chosen for inference and why it was chosen.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The device.
    pub device: Device,
    /// Why: the GPU's name and memory, or why the CPU (`auto` on a machine without a
    /// usable GPU says what is missing).
    pub reason: String,
}

/// The device named by `choice`: `cpu`, `cuda:N`, or `auto` (CUDA device 0 when this build
/// has the `cuda` feature and a GPU answers, else the CPU).
///
/// # Errors
/// [`Error::Request`] for another name; [`Error::Device`] for a CUDA device this build or
/// machine cannot open (saying which library or how many devices there are).
pub fn device(choice: &str) -> Result<Device> {
    place(choice).map(|p| p.device)
}

/// [`device`] with the reason for the choice.
///
/// # Errors
/// As [`device`].
pub fn place(choice: &str) -> Result<Placement> {
    match choice {
        "cpu" => Ok(Placement {
            device: Device::Cpu,
            reason: "asked for (device = \"cpu\")".into(),
        }),
        "auto" => Ok(match open_cuda(0) {
            Ok(p) => p,
            Err(why) => Placement {
                device: Device::Cpu,
                reason: format!("auto: no CUDA device ({why})"),
            },
        }),
        other => {
            let n = other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    Error::Request(format!("device {other:?} is not auto, cpu or cuda:N"))
                })?;
            open_cuda(n).map_err(|why| Error::Device(format!("device cuda:{n}: {why}")))
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_: usize) -> std::result::Result<Placement, String> {
    Err(
        "this build has no CUDA runtime (build fleetmesh-inference with the `cuda` feature, \
         the appliance with `cuda-inference`, which needs the CUDA toolkit: images/cuda.sh)"
            .into(),
    )
}

#[cfg(feature = "cuda")]
fn open_cuda(n: usize) -> std::result::Result<Placement, String> {
    if let Some(missing) = cuda::missing_library() {
        return Err(format!("{missing} cannot be loaded"));
    }
    cuda::driver_new_enough()?;
    let count = cudarc::driver::CudaContext::device_count()
        .map_err(|e| format!("the CUDA driver answers {e}"))?;
    let count = usize::try_from(count).unwrap_or(0);
    if n >= count {
        return Err(match count {
            0 => "the driver sees no CUDA device".to_owned(),
            1 => "this machine has 1 CUDA device (cuda:0)".to_owned(),
            c => format!(
                "this machine has {c} CUDA devices (cuda:0 to cuda:{})",
                c - 1
            ),
        });
    }
    // cudarc panics on a driver function it cannot find: a reason, never a crash
    let device = std::panic::catch_unwind(|| Device::new_cuda(n))
        .map_err(|_| "the CUDA driver lacks a function this build calls".to_owned())?
        .map_err(|e| e.to_string())?;
    let (free, total) = cuda::memory(&device).map_err(|e| e.to_string())?;
    let name = cuda::name(&device).unwrap_or_else(|_| "a CUDA GPU".into());
    Ok(Placement {
        device,
        reason: format!(
            "cuda:{n}: {name}, {} MiB free of {} MiB",
            free >> 20,
            total >> 20
        ),
    })
}

/// Bytes free and in all on `device` (None on the CPU).
///
/// # Errors
/// [`Error::Device`] when the driver does not answer.
pub fn device_memory(device: &Device) -> Result<Option<(usize, usize)>> {
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        return cuda::memory(device)
            .map(Some)
            .map_err(|e| Error::Device(format!("device memory: {e}")));
    }
    let _ = device;
    Ok(None)
}

/// The most tokens of context [`check_fits`] reserves KV-cache room for at load: a model's
/// full context (128 Ki tokens for Llama 3) would refuse small models on large GPUs; longer
/// sequences find out at run time (an out-of-memory error fails that request only).
pub const FIT_CONTEXT: usize = 32 * 1024;

/// Refuses a model whose weights and the KV cache of one sequence of `tokens` (at most
/// [`FIT_CONTEXT`]) do not fit in `free` bytes of device memory, naming the sizes, so a
/// model too large for the GPU is refused at load, never by an out-of-memory error in the
/// middle of a request.
///
/// # Errors
/// [`Error::Device`] naming what is needed and what is free.
pub fn check_fits(weights: usize, kv_per_token: usize, tokens: usize, free: usize) -> Result<()> {
    // the activations of a step, candle's workspace and the allocator's slack
    const HEADROOM: usize = 256 << 20;
    let tokens = tokens.min(FIT_CONTEXT);
    let kv = kv_per_token.saturating_mul(tokens);
    let need = weights.saturating_add(kv).saturating_add(HEADROOM);
    if need > free {
        return Err(Error::Device(format!(
            "the model needs {} MiB on the device ({} MiB of weights, {} MiB of KV cache for \
             one sequence of {tokens} tokens, {} MiB of working space) and {} MiB are free",
            need >> 20,
            weights >> 20,
            kv >> 20,
            HEADROOM >> 20,
            free >> 20
        )));
    }
    Ok(())
}

// cudarc's loaders are `unsafe fn`s (they dlopen NVIDIA's libraries)
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
mod cuda {
    use candle_core::Device;

    /// One library: its name in doctor's report, how an error names it, its file name's
    /// stem, cudarc's check that it loads, and cudarc's loader (which keeps it loaded).
    struct Lib {
        name: &'static str,
        what: &'static str,
        stem: &'static str,
        present: unsafe fn() -> bool,
        load: fn(),
    }

    // SAFETY (every `load`): called only where `present` said the library loads, since
    // cudarc's loader panics otherwise; it keeps the library loaded, as candle would.
    const LIBS: [Lib; 5] = [
        Lib {
            name: "driver",
            what: "the NVIDIA driver (libcuda.so.1)",
            stem: "libcuda.so",
            present: cudarc::driver::sys::is_culib_present,
            load: || {
                let _ = unsafe { cudarc::driver::sys::culib() };
            },
        },
        Lib {
            name: "cublas",
            what: "cuBLAS (libcublas.so.13)",
            stem: "libcublas.so",
            present: cudarc::cublas::sys::is_culib_present,
            load: || {
                let _ = unsafe { cudarc::cublas::sys::culib() };
            },
        },
        Lib {
            name: "cublaslt",
            what: "cuBLASLt (libcublasLt.so.13)",
            stem: "libcublasLt.so",
            present: cudarc::cublaslt::sys::is_culib_present,
            load: || {
                let _ = unsafe { cudarc::cublaslt::sys::culib() };
            },
        },
        Lib {
            name: "curand",
            what: "cuRAND (libcurand.so.10)",
            stem: "libcurand.so",
            present: cudarc::curand::sys::is_culib_present,
            load: || {
                let _ = unsafe { cudarc::curand::sys::culib() };
            },
        },
        Lib {
            name: "nvrtc",
            what: "NVRTC (libnvrtc.so.13)",
            stem: "libnvrtc.so",
            present: cudarc::nvrtc::sys::is_culib_present,
            load: || {
                let _ = unsafe { cudarc::nvrtc::sys::culib() };
            },
        },
    ];

    fn loads(lib: &Lib) -> bool {
        // SAFETY: the check only tries `dlopen` on the library's usual names and closes
        // what it opened; loading runs the library's initialisers, which NVIDIA's
        // libraries keep free of side effects that matter here.
        unsafe { (lib.present)() }
    }

    /// The CUDA version this build's bindings and kernels are made for (cudarc's
    /// `cuda-13000`, nvcc 13.0's PTX).
    const CUDA_BUILT: i32 = 13_000;

    /// Refuses a driver older than the CUDA version this build needs, naming both (a
    /// driver of an older branch cannot JIT-compile the kernels' PTX and may lack
    /// functions the bindings call).
    pub(super) fn driver_new_enough() -> Result<(), String> {
        let mut version = 0;
        // SAFETY: cuDriverGetVersion(int*) writes one int; callable before cuInit.
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        if status != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(format!(
                "the CUDA driver does not say its version ({status:?})"
            ));
        }
        if version < CUDA_BUILT {
            return Err(format!(
                "the NVIDIA driver supports CUDA {}.{} and this build needs {}.{} (driver R580 \
                 or newer)",
                version / 1000,
                version % 1000 / 10,
                CUDA_BUILT / 1000,
                CUDA_BUILT % 1000 / 10
            ));
        }
        Ok(())
    }

    /// The first of the libraries candle opens with a device (all but NVRTC) that cannot
    /// be loaded.
    pub(super) fn missing_library() -> Option<&'static str> {
        LIBS.iter()
            .filter(|l| l.name != "nvrtc")
            .find(|l| !loads(l))
            .map(|l| l.what)
    }

    /// Each library's name and the file it is mapped from once loaded.
    pub(super) fn libraries() -> Vec<(&'static str, Option<String>)> {
        LIBS.iter()
            .map(|lib| {
                if !loads(lib) {
                    return (lib.name, None);
                }
                (lib.load)();
                (
                    lib.name,
                    Some(mapped(lib.stem).unwrap_or_else(|| lib.stem.to_owned())),
                )
            })
            .collect()
    }

    /// The file a loaded library whose name starts `stem.` is mapped from.
    fn mapped(stem: &str) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|path| {
                path.rsplit('/')
                    .next()
                    .and_then(|f| f.strip_prefix(stem))
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
            })
            .map(str::to_owned)
    }

    pub(super) fn memory(device: &Device) -> candle_core::Result<(usize, usize)> {
        let cuda = device.as_cuda_device()?;
        cuda.cuda_stream()
            .context()
            .mem_get_info()
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    pub(super) fn name(device: &Device) -> candle_core::Result<String> {
        let cuda = device.as_cuda_device()?;
        cuda.cuda_stream()
            .context()
            .name()
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }
}

/// The CUDA libraries inference opens, each with the file it loads from (None where it
/// cannot be loaded); empty in a build without the `cuda` feature. For `meshnode doctor`
/// and the image check: a GPU image carries these, the host (or the NVIDIA container
/// toolkit) only the driver.
pub fn cuda_libraries() -> Vec<(&'static str, Option<String>)> {
    #[cfg(feature = "cuda")]
    {
        cuda::libraries()
    }
    #[cfg(not(feature = "cuda"))]
    Vec::new()
}

/// The first device fault since start-up: what a CUDA device answered when a forward pass
/// on it failed for another reason than running out of memory.
static FAULT: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Records that a forward pass on `device` failed with `err`. On a CUDA device a driver
/// error other than `CUDA_ERROR_OUT_OF_MEMORY` (an uncorrectable ECC error, a lost or
/// reset device, an illegal address, which leave the context unusable) or a panic is a
/// device fault: the first is kept for [`device_fault`] (the node's `/healthz` and `meshnode
/// watch` say degraded) and the answer is an [`Error::Device`]; other errors pass unchanged.
pub fn record_failure(device: &Device, err: Error) -> Error {
    let Some(gpu) = gpu_index(device) else {
        return err;
    };
    let text = err.to_string();
    if !is_device_fault(&text) {
        return err;
    }
    let what = format!("cuda:{gpu}: {text}");
    metrics::counter!("fleetmesh_inference_device_faults_total").increment(1);
    let mut fault = FAULT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    fault.get_or_insert_with(|| what.clone());
    Error::Device(what)
}

/// Whether a failed step's error says the device, not the request, failed.
fn is_device_fault(text: &str) -> bool {
    if text.contains("CUDA_ERROR_OUT_OF_MEMORY") || text.contains("out of memory") {
        return false;
    }
    text.contains("CUDA_ERROR") || text.contains("panicked") || text.contains("DriverError")
}

/// The first device fault since start-up (None while every device answers).
pub fn device_fault() -> Option<String> {
    FAULT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The engine name executors report for a model on `device`: the runtime and where it runs
/// (`fleetmesh-candle/cpu`, `fleetmesh-candle/cuda`), since a GPU's F32 arithmetic is not
/// the CPU's.
pub fn engine_name(device: &Device) -> String {
    let place = if device.is_cuda() { "cuda" } else { "cpu" };
    format!("{}/{place}", crate::executor::ENGINE)
}

/// The CUDA ordinal of `device` (None on the CPU): which GPU's evidence covers a job.
pub fn gpu_index(device: &Device) -> Option<u32> {
    match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => Some(gpu_id as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_that_does_not_fit_is_refused_with_its_sizes() {
        let mib = 1 << 20;
        check_fits(1000 * mib, mib / 1024, 4096, 2000 * mib).unwrap();
        let err = check_fits(1000 * mib, mib / 2, 4096, 2000 * mib)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs 3304 MiB"), "{err}");
        assert!(err.contains("1000 MiB of weights"), "{err}");
        assert!(
            err.contains("2048 MiB of KV cache for one sequence of 4096 tokens"),
            "{err}"
        );
        assert!(err.contains("2000 MiB are free"), "{err}");
        // the context reserved is capped; sizes that overflow are refused, not wrapped
        let err = check_fits(0, mib / 16, 1 << 20, 2000 * mib)
            .unwrap_err()
            .to_string();
        assert!(err.contains("32768 tokens"), "{err}");
        assert!(check_fits(usize::MAX, usize::MAX, usize::MAX, usize::MAX - 1).is_err());
    }

    #[test]
    fn a_lost_device_is_told_from_a_full_one_and_the_cpu_records_nothing() {
        assert!(is_device_fault(
            "forward: DriverError(CUDA_ERROR_ECC_UNCORRECTABLE, \"uncorrectable ECC error\")"
        ));
        assert!(is_device_fault(
            "forward: DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"\")"
        ));
        assert!(is_device_fault("the forward pass panicked"));
        assert!(!is_device_fault(
            "projection: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")"
        ));
        assert!(!is_device_fault("a context longer than the model's"));
        // a CPU step's failure is the request's: nothing is recorded, the error unchanged
        let err = record_failure(
            &Device::Cpu,
            Error::Request("the forward pass panicked".into()),
        );
        assert!(matches!(err, Error::Request(_)));
        assert_eq!(device_fault(), None);
    }
}
