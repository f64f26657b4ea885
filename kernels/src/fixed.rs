//! What a backend prepares once for a base vector that never changes (a proving key's):
//! [`Fixed`] is either the CPU's precomputed shifted copies ([`Shifted`]) or a copy kept
//! in a GPU's memory ([`Kept`], made by [`crate::MsmNtt::keep_g1`] / `keep_g2`), passed
//! back to `msm_g1_fixed` / `msm_g2_fixed` with the same bases.
//!
//! A `Fixed` offered with other bases (another key's), or to another backend than the one
//! that made it, is not used: the MSM then runs as if there were none, with the same
//! result. A kept copy is freed when its `Fixed` is dropped (when the circuit unloads).

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

use ark_ec::short_weierstrass::{Affine, SWCurveConfig};

use crate::msm::Shifted;

/// A base vector prepared for one backend.
pub enum Fixed<P: SWCurveConfig> {
    /// Precomputed shifted copies, for the CPU backend.
    Shifted(Shifted<P>),
    /// A copy in a GPU's memory.
    Kept(Kept<P>),
}

impl<P: SWCurveConfig> std::fmt::Debug for Fixed<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fixed::Shifted(s) => s.fmt(f),
            Fixed::Kept(k) => f
                .debug_struct("Kept")
                .field("n", &k.n)
                .field("bytes", &k.bytes)
                .finish(),
        }
    }
}

impl<P: SWCurveConfig> Fixed<P> {
    /// The bytes it takes (host memory for shifted copies, device memory for a kept one).
    #[must_use]
    pub fn bytes(&self) -> usize {
        match self {
            Fixed::Shifted(s) => s.bytes(),
            Fixed::Kept(k) => k.bytes,
        }
    }

    /// The shifted copies, where that is what it holds.
    #[must_use]
    pub fn shifted(&self) -> Option<&Shifted<P>> {
        match self {
            Fixed::Shifted(s) => Some(s),
            Fixed::Kept(_) => None,
        }
    }

    /// The kept copy, where that is what it holds.
    #[must_use]
    pub fn kept(&self) -> Option<&Kept<P>> {
        match self {
            Fixed::Kept(k) => Some(k),
            Fixed::Shifted(_) => None,
        }
    }
}

/// A base vector's copy in one GPU backend's memory.
pub struct Kept<P: SWCurveConfig> {
    n: usize,
    /// The first and last base it was made from: offered with other bases, it is not used.
    ends: Option<(Affine<P>, Affine<P>)>,
    bytes: usize,
    /// Which backend instance made it ([`new_owner`]).
    owner: u64,
    on_device: Box<dyn Any + Send + Sync>,
}

/// A fresh identity for a GPU backend instance, so that a [`Kept`] copy is only ever read
/// by the device (and context) that holds it.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn ends<P: SWCurveConfig>(bases: &[Affine<P>]) -> Option<(Affine<P>, Affine<P>)> {
    bases.first().zip(bases.last()).map(|(f, l)| (*f, *l))
}

impl<P: SWCurveConfig> Kept<P> {
    /// `on_device` (the backend's buffer) holding `bytes` bytes made from `bases` by the
    /// backend `owner`.
    // made by the GPU backends only
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    pub(crate) fn new(
        bases: &[Affine<P>],
        bytes: usize,
        owner: u64,
        on_device: Box<dyn Any + Send + Sync>,
    ) -> Kept<P> {
        Kept {
            n: bases.len(),
            ends: ends(bases),
            bytes,
            owner,
            on_device,
        }
    }

    /// The device buffer of type `T`, if backend `owner` made this copy from `bases`.
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    pub(crate) fn on<T: 'static>(&self, owner: u64, bases: &[Affine<P>]) -> Option<&T> {
        if self.owner != owner || self.n != bases.len() || self.ends != ends(bases) {
            return None;
        }
        self.on_device.downcast_ref()
    }

    /// The device memory it takes.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use ark_bn254::{Fr, G1Affine, G1Projective, g1};
    use ark_ec::{CurveGroup, PrimeGroup};

    use super::*;

    #[test]
    fn a_kept_copy_is_read_only_by_its_owner_with_its_own_bases() {
        let g = G1Projective::generator();
        let bases: Vec<G1Affine> = (1..5u64).map(|k| (g * Fr::from(k)).into_affine()).collect();
        let kept = Kept::<g1::Config>::new(&bases, 128, 7, Box::new(42u32));
        assert_eq!(kept.on::<u32>(7, &bases), Some(&42));
        assert_eq!(kept.on::<u32>(8, &bases), None, "another backend");
        assert_eq!(kept.on::<u64>(7, &bases), None, "another buffer type");
        assert_eq!(kept.on::<u32>(7, &bases[..3]), None, "fewer bases");
        let mut other = bases.clone();
        other[3] = bases[0];
        assert_eq!(kept.on::<u32>(7, &other), None, "other bases");
        assert_ne!(new_owner(), new_owner());
        let fixed = Fixed::Kept(kept);
        assert_eq!(fixed.bytes(), 128);
        assert!(fixed.shifted().is_none() && fixed.kept().is_some());
    }
}
