//! Stand-in for the wgpu probe in builds without the `wgpu` feature.

use crate::probe::GpuAdapter;
use crate::{Error, Result};

/// Always the "not compiled" error, so callers need no `cfg`.
pub(crate) fn adapters() -> Result<Vec<GpuAdapter>> {
    Err(Error::NotCompiled {
        backend: "wgpu",
        feature: "wgpu",
    })
}
