//! The CUDA backend in a build without the `cuda` feature: same API, the constructor says
//! which feature would enable it.

use crate::ops::MsmNtt;
use crate::{Error, Result};

/// Stands in for the CUDA backend; cannot be constructed in this build.
#[derive(Debug)]
pub struct CudaBackend {
    _never: std::convert::Infallible,
}

impl CudaBackend {
    /// Always fails: this build has no CUDA support.
    ///
    /// # Errors
    /// [`Error::NotCompiled`], naming the `cuda` feature.
    pub fn new(_ordinal: u32) -> Result<CudaBackend> {
        Err(Error::NotCompiled {
            backend: "cuda",
            feature: "cuda",
        })
    }

    /// Unreachable: no value of this type exists in this build.
    pub fn set_g2_gpu_from(&mut self, _points: usize) {
        match self._never {}
    }
}

impl MsmNtt for CudaBackend {
    fn describe(&self) -> String {
        match self._never {}
    }
}
