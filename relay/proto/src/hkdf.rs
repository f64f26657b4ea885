//! HKDF-SHA256 (RFC 5869, the `hkdf` crate) and the blinded tags built on it.
//!
//! [`extract`] and [`expand`] are the two halves of RFC 5869 (checked against its
//! Appendix A vectors); NIP-44 v2 uses them for its conversation and message keys.
//! [`blinded_tag`] is how a receipt names a job without revealing it: only the two
//! parties of a pair share the ECDH secret it is derived from, so only they can
//! recompute (and so recognise) the tag.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Error, Result};

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 of the parts of `data`, concatenated, under `key`.
pub(crate) fn hmac(key: &[u8], data: &[&[u8]]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for d in data {
        m.update(d);
    }
    m.finalize().into_bytes().into()
}

/// HKDF-Extract: the pseudorandom key of `ikm` under `salt` (an empty salt is 32 zero
/// bytes, as RFC 5869 says; HMAC pads both to the same block).
pub fn extract(salt: &[u8], ikm: &[u8]) -> [u8; 32] {
    let (prk, _) = hkdf::Hkdf::<Sha256>::extract(Some(salt), ikm);
    prk.into()
}

/// HKDF-Expand: `len` bytes of output keying material from `prk` and `info`.
///
/// # Errors
/// [`Error::Crypto`] when `len` is over 255 × 32 bytes (RFC 5869's limit).
pub fn expand(prk: &[u8; 32], info: &[u8], len: usize) -> Result<Vec<u8>> {
    let too_long = || Error::Crypto(format!("HKDF-Expand: {len} bytes asked, at most 8160"));
    let hk = hkdf::Hkdf::<Sha256>::from_prk(prk).map_err(|_| too_long())?;
    let mut out = vec![0u8; len];
    hk.expand(info, &mut out).map_err(|_| too_long())?;
    Ok(out)
}

/// Salt of [`blinded_tag`]'s extract step.
const BLIND_SALT: &[u8] = b"fleetmesh/blinded-tag/v1";

/// The 32-byte tag of `label` between `secret`'s owner and `peer` (x-only public key,
/// hex): HKDF-SHA256 with salt `"fleetmesh/blinded-tag/v1"`, IKM the x coordinate of the
/// ECDH point `secret · peer` (even y), info `label`. Both sides of the pair get the same
/// tag; anyone else cannot compute it.
///
/// # Errors
/// [`Error::Crypto`] for a peer key that is not a curve point.
pub fn blinded_tag(secret: &secp256k1::SecretKey, peer: &str, label: &[u8]) -> Result<[u8; 32]> {
    let shared = crate::nip44::shared_x(secret, peer)?;
    let prk = extract(BLIND_SALT, &shared);
    Ok(expand(&prk, label, 32)?.try_into().expect("32 bytes asked"))
}
