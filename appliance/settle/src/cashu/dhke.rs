//! The blind Diffie-Hellman key exchange of NUT-00: how a wallet gets a mint's signature
//! on a secret the mint never sees, and the amounts and keyset ids around it.
//!
//! The wallet picks a secret `x` and a blinding factor `r`, sends `B_ = Y + rG` with
//! `Y = hash_to_curve(x)`, gets `C_ = kB_` back and keeps `C = C_ - rK`, which equals
//! `kY`: the mint can check it later without being able to link it to `B_`.

use std::collections::BTreeMap;

use secp256k1::{PublicKey, Scalar, SecretKey};
use sha2::{Digest, Sha256};

use crate::{Result, SettleError};

/// NUT-00's domain separator for [`hash_to_curve`].
const DOMAIN: &[u8] = b"Secp256k1_HashToCurve_Cashu_";

/// How many counters [`hash_to_curve`] tries; each succeeds with probability ~1/2.
const MAX_TRIES: u32 = 1 << 16;

/// NUT-00 `hash_to_curve`: the first `02 || SHA256(SHA256(DOMAIN || x) || counter_le)`
/// that is a point on secp256k1.
pub fn hash_to_curve(x: &[u8]) -> Result<PublicKey> {
    let msg_hash = Sha256::new()
        .chain_update(DOMAIN)
        .chain_update(x)
        .finalize();
    for counter in 0..MAX_TRIES {
        let h = Sha256::new()
            .chain_update(msg_hash)
            .chain_update(counter.to_le_bytes())
            .finalize();
        let mut compressed = [0u8; 33];
        compressed[0] = 0x02;
        compressed[1..].copy_from_slice(&h);
        if let Ok(p) = PublicKey::from_slice(&compressed) {
            return Ok(p);
        }
    }
    Err(SettleError::Crypto("hash_to_curve found no point".into()))
}

/// `B_ = hash_to_curve(secret) + rG`: what the wallet sends the mint.
pub fn blind(secret: &[u8], r: &SecretKey) -> Result<PublicKey> {
    let y = hash_to_curve(secret)?;
    y.combine(&PublicKey::from_secret_key(r))
        .map_err(|e| SettleError::Crypto(format!("blinding: {e}")))
}

/// `C = C_ - rK`: the mint's signature on the secret itself, from its signature `C_` on
/// the blinded message and the mint's public key `K` for that amount.
pub fn unblind(c_: &PublicKey, r: &SecretKey, k: &PublicKey) -> Result<PublicKey> {
    let rk = k
        .mul_tweak(&Scalar::from(*r))
        .map_err(|e| SettleError::Crypto(format!("unblinding: {e}")))?;
    c_.combine(&rk.negate())
        .map_err(|e| SettleError::Crypto(format!("unblinding: {e}")))
}

/// `C_ = kB_`: the mint's side, for tests and for checking a mint's answer against its
/// own key in vectors.
pub fn sign(k: &SecretKey, b_: &PublicKey) -> Result<PublicKey> {
    b_.mul_tweak(&Scalar::from(*k))
        .map_err(|e| SettleError::Crypto(format!("signing: {e}")))
}

/// A fresh blinding factor from the operating system's generator.
pub fn random_scalar() -> Result<SecretKey> {
    loop {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).map_err(|e| SettleError::Crypto(format!("randomness: {e}")))?;
        if let Ok(k) = SecretKey::from_secret_bytes(b) {
            return Ok(k);
        }
    }
}

/// A fresh secret as wallets write them: 32 random bytes in lowercase hex.
pub fn random_secret() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| SettleError::Crypto(format!("randomness: {e}")))?;
    Ok(hex::encode(b))
}

/// The keyset id (NUT-02, version `00`) of a mint's public keys: `00` and the first 7
/// bytes of SHA-256 over the compressed keys in ascending amount order, in hex.
pub fn keyset_id(keys: &BTreeMap<u64, PublicKey>) -> String {
    let mut h = Sha256::new();
    for k in keys.values() {
        h.update(k.serialize());
    }
    format!("00{}", &hex::encode(h.finalize())[..14])
}

/// An amount as the powers of two that sum to it, smallest first (13 → 1, 4, 8).
pub fn split(amount: u64) -> Vec<u64> {
    (0..64)
        .map(|i| 1u64 << i)
        .filter(|bit| amount & bit != 0)
        .collect()
}

/// A compressed point from hex, named in the error.
pub fn point(hex_str: &str, what: &str) -> Result<PublicKey> {
    let bytes = hex::decode(hex_str).map_err(|e| SettleError::Crypto(format!("{what}: {e}")))?;
    PublicKey::from_slice(&bytes).map_err(|e| SettleError::Crypto(format!("{what}: {e}")))
}

/// A scalar from hex, named in the error.
pub fn scalar(hex_str: &str, what: &str) -> Result<SecretKey> {
    let bytes: [u8; 32] = hex::decode(hex_str)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| SettleError::Crypto(format!("{what}: not 32 bytes of hex")))?;
    SecretKey::from_secret_bytes(bytes).map_err(|e| SettleError::Crypto(format!("{what}: {e}")))
}
