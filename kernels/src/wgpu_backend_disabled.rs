//! The wgpu backend in a build without the `wgpu` feature: same API, every constructor
//! says which feature would enable it.

use crate::ops::MsmNtt;
use crate::{Error, Result};

/// Stands in for the wgpu backend; cannot be constructed in this build.
#[derive(Debug)]
pub struct WgpuBackend {
    _never: std::convert::Infallible,
}

impl WgpuBackend {
    /// Always fails: this build has no wgpu support.
    ///
    /// # Errors
    /// [`Error::NotCompiled`], naming the `wgpu` feature.
    pub fn new(_index: usize) -> Result<WgpuBackend> {
        Err(Error::NotCompiled {
            backend: "wgpu",
            feature: "wgpu",
        })
    }
}

impl WgpuBackend {
    /// Unreachable: no value of this type exists in this build.
    ///
    /// # Errors
    /// Never returns.
    pub fn g1_add_check(
        &self,
        _p: &[ark_bn254::G1Affine],
        _q: &[ark_bn254::G1Affine],
    ) -> Result<Vec<ark_bn254::G1Affine>> {
        match self._never {}
    }

    /// Unreachable: no value of this type exists in this build.
    pub fn set_g2_gpu_from(&mut self, _points: usize) {
        match self._never {}
    }
}

impl MsmNtt for WgpuBackend {
    fn describe(&self) -> String {
        match self._never {}
    }
}
