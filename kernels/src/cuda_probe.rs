//! Probes the CUDA driver and NVRTC by loading them with `dlopen`, so a machine without
//! CUDA gets "unavailable" and a reason instead of a panic on first use (which is what
//! cudarc's dynamic loading does when the library is absent).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint};

use libloading::Library;

use crate::probe::CudaStatus;

#[cfg(target_os = "linux")]
const DRIVER: &[&str] = &["libcuda.so.1", "libcuda.so"];
#[cfg(target_os = "windows")]
const DRIVER: &[&str] = &["nvcuda.dll"];
#[cfg(not(any(target_os = "linux", target_os = "windows")))]
const DRIVER: &[&str] = &[];

#[cfg(target_os = "linux")]
const NVRTC: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];
#[cfg(target_os = "windows")]
const NVRTC: &[&str] = &[
    "nvrtc64_130_0.dll",
    "nvrtc64_120_0.dll",
    "nvrtc64_112_0.dll",
];
#[cfg(not(any(target_os = "linux", target_os = "windows")))]
const NVRTC: &[&str] = &[];

fn open_first(names: &[&str]) -> Option<Library> {
    names.iter().find_map(|name| {
        // SAFETY: loading a shared library runs its initialisers; the CUDA driver and NVRTC
        // are system libraries whose initialisers are side-effect free for our purposes.
        unsafe { Library::new(*name) }.ok()
    })
}

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type NvrtcVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

/// Whether NVRTC loads, with or without a driver (the kernels' compile check needs only it).
#[cfg(all(test, feature = "cuda"))]
pub(crate) fn nvrtc_loads() -> bool {
    open_first(NVRTC).is_some()
}

pub(crate) fn probe() -> CudaStatus {
    let unavailable = |reason: String| CudaStatus::Unavailable { reason };
    if DRIVER.is_empty() {
        return unavailable("CUDA is not supported on this operating system".into());
    }
    let Some(driver) = open_first(DRIVER) else {
        return unavailable(format!("no CUDA driver ({} not found)", DRIVER[0]));
    };
    // SAFETY: the symbols are looked up by their documented names with their documented
    // C signatures (CUDA Driver API, cuda.h); every out-pointer points at a live local.
    let (version, devices) = match unsafe { query_driver(&driver) } {
        Ok(v) => v,
        Err(reason) => return unavailable(reason),
    };
    // SAFETY: as above, nvrtc.h's `nvrtcVersion(int*, int*)`.
    let nvrtc_version = open_first(NVRTC).and_then(|lib| unsafe {
        let f = lib.get::<NvrtcVersion>(b"nvrtcVersion\0").ok()?;
        let (mut major, mut minor) = (0, 0);
        (f(&mut major, &mut minor) == 0).then_some((major, minor))
    });
    CudaStatus::Available {
        driver_version: version,
        devices,
        nvrtc_version,
    }
}

unsafe fn query_driver(lib: &Library) -> Result<(i32, Vec<String>), String> {
    let sym = |name: &str| format!("the CUDA driver lacks {name}");
    // SAFETY: see the caller.
    unsafe {
        let init = lib.get::<CuInit>(b"cuInit\0").map_err(|_| sym("cuInit"))?;
        let code = init(0);
        if code != 0 {
            return Err(format!(
                "cuInit failed with CUresult {code} (no usable GPU or driver mismatch)"
            ));
        }
        let get_version = lib
            .get::<CuDriverGetVersion>(b"cuDriverGetVersion\0")
            .map_err(|_| sym("cuDriverGetVersion"))?;
        let mut version = 0;
        get_version(&mut version);
        let count_fn = lib
            .get::<CuDeviceGetCount>(b"cuDeviceGetCount\0")
            .map_err(|_| sym("cuDeviceGetCount"))?;
        let mut count = 0;
        if count_fn(&mut count) != 0 {
            return Err("cuDeviceGetCount failed".into());
        }
        let device_get = lib
            .get::<CuDeviceGet>(b"cuDeviceGet\0")
            .map_err(|_| sym("cuDeviceGet"))?;
        let name_fn = lib
            .get::<CuDeviceGetName>(b"cuDeviceGetName\0")
            .map_err(|_| sym("cuDeviceGetName"))?;
        let mut names = Vec::new();
        for ordinal in 0..count {
            let mut dev = 0;
            let mut buf = [0 as c_char; 256];
            let name = if device_get(&mut dev, ordinal) == 0
                && name_fn(buf.as_mut_ptr(), buf.len() as c_int, dev) == 0
            {
                std::ffi::CStr::from_ptr(buf.as_ptr())
                    .to_string_lossy()
                    .into_owned()
            } else {
                format!("device {ordinal} (name unavailable)")
            };
            names.push(name);
        }
        if names.is_empty() {
            return Err("the CUDA driver loaded but reports no devices".into());
        }
        Ok((version, names))
    }
}
