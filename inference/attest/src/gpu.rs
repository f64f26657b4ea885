//! NVIDIA GPU evidence from this host's driver: NVML's confidential-computing calls, loaded
//! at run time (`libnvidia-ml.so.1`), so the crate builds and runs without a driver.
//!
//! The evidence is what [`super::nvidia::verify`] checks: the SPDM GET_MEASUREMENTS
//! request and signed response over the caller's 32-byte nonce, and the GPU's certificate
//! chain (PEM). It exists only on Hopper-or-later GPUs with confidential computing on; any
//! other host gets an error saying which of those is missing — evidence is never made up.
// FFI into NVML: the structures are NVML's (nvml.h, R535+), the calls checked one by one.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_uint, c_void};

use crate::{Error, Result};

/// The library NVML lives in.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

#[repr(C)]
struct AttestationReport {
    is_cec_present: c_uint,
    report_size: c_uint,
    cec_size: c_uint,
    nonce: [u8; 0x20],
    report: [u8; 0x2000],
    cec: [u8; 0x1000],
}

#[repr(C)]
struct GpuCertificate {
    cert_chain_size: c_uint,
    attestation_cert_chain_size: c_uint,
    cert_chain: [u8; 0x1000],
    attestation_cert_chain: [u8; 0x1400],
}

#[repr(C)]
#[derive(Default)]
struct SystemState {
    environment: c_uint,
    cc_feature: c_uint,
    dev_tools_mode: c_uint,
}

type Device = *mut c_void;

/// One GPU's evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuEvidence {
    /// The SPDM GET_MEASUREMENTS request and response (what `attest verify --nvidia`
    /// reads).
    pub report: Vec<u8>,
    /// The GPU's attestation certificate chain, PEM, device certificate first.
    pub chain: Vec<u8>,
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable(format!(
        "this host cannot produce NVIDIA GPU evidence: {}",
        reason.into()
    ))
}

/// Asks GPU `index`'s driver for evidence over `nonce`.
///
/// # Errors
/// [`Error::Unavailable`] naming what is missing: no NVIDIA driver, a driver without the
/// confidential-computing calls, confidential computing off, no such GPU, or the driver's
/// refusal (its error string).
pub fn collect_gpu_evidence(index: u32, nonce: &[u8; 32]) -> Result<GpuEvidence> {
    // SAFETY: loading NVML runs its initializers, which have no preconditions.
    let lib = unsafe { libloading::Library::new(NVML_LIBRARY) }
        .map_err(|e| unavailable(format!("no NVIDIA driver ({NVML_LIBRARY}: {e})")))?;
    let nvml = Nvml { lib: &lib };
    nvml.call0("nvmlInit_v2")?;
    let result = collect_with(&nvml, index, nonce);
    let _ = nvml.call0("nvmlShutdown");
    result
}

struct Nvml<'a> {
    lib: &'a libloading::Library,
}

impl Nvml<'_> {
    fn symbol<T>(&self, name: &str) -> Result<libloading::Symbol<'_, T>> {
        // SAFETY: each name is looked up with the prototype nvml.h declares for it.
        unsafe { self.lib.get::<T>(name.as_bytes()) }.map_err(|_| {
            unavailable(format!(
                "the driver's NVML has no {name} (confidential computing needs driver R535 or later)"
            ))
        })
    }

    fn check(&self, what: &str, ret: i32) -> Result<()> {
        if ret == 0 {
            return Ok(());
        }
        let text = self
            .symbol::<unsafe extern "C" fn(i32) -> *const c_char>("nvmlErrorString")
            .ok()
            // SAFETY: nvmlErrorString returns a static NUL-terminated string.
            .map(|f| {
                unsafe { CStr::from_ptr(f(ret)) }
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_else(|| format!("error {ret}"));
        Err(unavailable(format!("{what}: {text}")))
    }

    fn call0(&self, name: &str) -> Result<()> {
        let f = self.symbol::<unsafe extern "C" fn() -> i32>(name)?;
        // SAFETY: nvmlInit_v2 / nvmlShutdown take no arguments.
        let ret = unsafe { f() };
        self.check(name, ret)
    }
}

fn collect_with(nvml: &Nvml<'_>, index: u32, nonce: &[u8; 32]) -> Result<GpuEvidence> {
    let mut state = SystemState::default();
    let f = nvml
        .symbol::<unsafe extern "C" fn(*mut SystemState) -> i32>("nvmlSystemGetConfComputeState")?;
    // SAFETY: `state` is a valid nvmlConfComputeSystemState_t.
    nvml.check("nvmlSystemGetConfComputeState", unsafe { f(&mut state) })?;
    if state.cc_feature == 0 {
        return Err(unavailable(
            "confidential computing is off on this system (GPU evidence exists only in CC mode)",
        ));
    }
    let mut dev: Device = std::ptr::null_mut();
    let f = nvml.symbol::<unsafe extern "C" fn(c_uint, *mut Device) -> i32>(
        "nvmlDeviceGetHandleByIndex_v2",
    )?;
    // SAFETY: `dev` receives an opaque handle.
    nvml.check(&format!("GPU {index}"), unsafe { f(index, &mut dev) })?;

    let mut cert = Box::new(GpuCertificate {
        cert_chain_size: 0,
        attestation_cert_chain_size: 0,
        cert_chain: [0; 0x1000],
        attestation_cert_chain: [0; 0x1400],
    });
    let f = nvml.symbol::<unsafe extern "C" fn(Device, *mut GpuCertificate) -> i32>(
        "nvmlDeviceGetConfComputeGpuCertificate",
    )?;
    // SAFETY: `cert` is a valid nvmlConfComputeGpuCertificate_t for the driver to fill.
    nvml.check("nvmlDeviceGetConfComputeGpuCertificate", unsafe {
        f(dev, &mut *cert)
    })?;

    let mut report = Box::new(AttestationReport {
        is_cec_present: 0,
        report_size: 0,
        cec_size: 0,
        nonce: *nonce,
        report: [0; 0x2000],
        cec: [0; 0x1000],
    });
    let f = nvml.symbol::<unsafe extern "C" fn(Device, *mut AttestationReport) -> i32>(
        "nvmlDeviceGetConfComputeGpuAttestationReport",
    )?;
    // SAFETY: `report` is a valid nvmlConfComputeGpuAttestationReport_t, nonce filled in.
    nvml.check("nvmlDeviceGetConfComputeGpuAttestationReport", unsafe {
        f(dev, &mut *report)
    })?;
    let take = |buf: &[u8], n: c_uint, what: &str| {
        buf.get(..n as usize).map(<[u8]>::to_vec).ok_or_else(|| {
            Error::EvidenceMalformed(format!("the driver's {what} size {n} exceeds its buffer"))
        })
    };
    Ok(GpuEvidence {
        report: take(&report.report, report.report_size, "attestation report")?,
        chain: take(
            &cert.attestation_cert_chain,
            cert.attestation_cert_chain_size,
            "certificate chain",
        )?,
    })
}
