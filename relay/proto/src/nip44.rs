//! NIP-44 v2: the encryption of payloads between two Nostr keys (compute/1.0 carries job
//! payloads and results this way).
//!
//! The conversation key is HKDF-Extract(salt `"nip44-v2"`, the x coordinate of the ECDH
//! point); each message draws a 32-byte nonce, expands it into a ChaCha20 key and nonce
//! and an HMAC-SHA256 key, pads the plaintext to NIP-44's bucket sizes behind its length,
//! encrypts, and authenticates nonce ‖ ciphertext. The payload is base64 of
//! `0x02 ‖ nonce ‖ ciphertext ‖ mac`.
//!
//! Plaintexts of 1 byte up to 2³² − 1 bytes: this follows NIP-44 as amended on
//! 2026-06-28, where a plaintext over 65 535 bytes is written behind a 6-byte prefix
//! (`0x0000` then a big-endian u32); up to 65 535 bytes nothing changed (a 2-byte
//! big-endian length). Decryption checks the version, the sizes, the MAC (in constant
//! time) before anything else, then the padding.

use base64::Engine as _;
use chacha20::ChaCha20;
use chacha20::cipher::{KeyIvInit, StreamCipher};
use secp256k1::{PublicKey, SecretKey};

use hmac::Mac as _;

use crate::hkdf::{HmacSha256, expand, extract, hmac};
use crate::{Error, Result};

fn err(reason: impl Into<String>) -> Error {
    Error::Crypto(reason.into())
}

/// The x coordinate of `secret · peer`, `peer` an x-only public key in hex (even y).
pub(crate) fn shared_x(secret: &SecretKey, peer: &str) -> Result<[u8; 32]> {
    let x = hex::decode(peer)
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or_else(|| err(format!("public key {peer:?} is not 32 bytes of hex")))?;
    let mut sec1 = [2u8; 33];
    sec1[1..].copy_from_slice(&x);
    let point = PublicKey::from_slice(&sec1)
        .map_err(|_| err(format!("public key {peer} is not on the curve")))?;
    let xy = secp256k1::ecdh::shared_secret_point(&point, secret);
    Ok(xy[..32].try_into().expect("32 bytes"))
}

/// The conversation key between `secret` and `peer` (x-only, hex); the same from both
/// sides.
///
/// # Errors
/// [`Error::Crypto`] for a peer key that is not a curve point.
pub fn conversation_key(secret: &SecretKey, peer: &str) -> Result<[u8; 32]> {
    Ok(extract(b"nip44-v2", &shared_x(secret, peer)?))
}

/// A message's ChaCha20 key, ChaCha20 nonce and HMAC key.
pub fn message_keys(
    conversation_key: &[u8; 32],
    nonce: &[u8; 32],
) -> ([u8; 32], [u8; 12], [u8; 32]) {
    let k = expand(conversation_key, nonce, 76).expect("76 bytes is within HKDF's limit");
    (
        k[..32].try_into().expect("32"),
        k[32..44].try_into().expect("12"),
        k[44..].try_into().expect("32"),
    )
}

/// Longest plaintext (the amended spec's u32 length).
pub const MAX_PLAINTEXT: usize = u32::MAX as usize;

/// The padded length of a plaintext of `len` bytes: at least 32, then in eighths of the
/// next power of two (chunks of 32 up to 256).
pub fn padded_len(len: usize) -> usize {
    if len <= 32 {
        return 32;
    }
    let next_power = 1usize << (usize::BITS - (len - 1).leading_zeros());
    let chunk = if next_power <= 256 {
        32
    } else {
        next_power / 8
    };
    chunk * ((len - 1) / chunk + 1)
}

/// The length prefix and padded plaintext.
fn pad(plaintext: &[u8]) -> Result<Vec<u8>> {
    let n = plaintext.len();
    if n == 0 || n > MAX_PLAINTEXT {
        return Err(err(format!(
            "plaintext of {n} bytes; NIP-44 takes 1 to {MAX_PLAINTEXT}"
        )));
    }
    let mut out = if n <= 65_535 {
        (n as u16).to_be_bytes().to_vec()
    } else {
        let mut p = vec![0, 0];
        p.extend((n as u32).to_be_bytes());
        p
    };
    let prefix = out.len();
    out.extend_from_slice(plaintext);
    out.resize(prefix + padded_len(n), 0);
    Ok(out)
}

fn unpad(padded: &[u8]) -> Result<Vec<u8>> {
    let bad = || err("invalid padding");
    let short = u16::from_be_bytes(padded.get(..2).ok_or_else(bad)?.try_into().expect("2"));
    let (n, prefix) = if short > 0 {
        (usize::from(short), 2)
    } else {
        let long = u32::from_be_bytes(padded.get(2..6).ok_or_else(bad)?.try_into().expect("4"));
        // the extended prefix only for lengths the short one cannot hold
        if long <= 65_535 {
            return Err(bad());
        }
        (long as usize, 6)
    };
    if padded.len() != prefix + padded_len(n) {
        return Err(bad());
    }
    Ok(padded[prefix..prefix + n].to_vec())
}

/// Encrypts `plaintext` under `conversation_key` with `nonce` (draw it fresh from a CSPRNG
/// for every message: [`encrypt`] does).
///
/// # Errors
/// [`Error::Crypto`] for an empty or over-long plaintext.
pub fn encrypt_with_nonce(
    conversation_key: &[u8; 32],
    plaintext: &[u8],
    nonce: &[u8; 32],
) -> Result<String> {
    let (key, iv, mac_key) = message_keys(conversation_key, nonce);
    let mut body = pad(plaintext)?;
    ChaCha20::new(&key.into(), &iv.into()).apply_keystream(&mut body);
    let mac = hmac(&mac_key, &[nonce, &body]);
    let mut raw = Vec::with_capacity(1 + 32 + body.len() + 32);
    raw.push(2);
    raw.extend_from_slice(nonce);
    raw.extend_from_slice(&body);
    raw.extend_from_slice(&mac);
    Ok(base64::engine::general_purpose::STANDARD.encode(raw))
}

/// Encrypts `plaintext` with a fresh random nonce.
///
/// # Errors
/// As [`encrypt_with_nonce`], or when the system has no randomness.
pub fn encrypt(conversation_key: &[u8; 32], plaintext: &[u8]) -> Result<String> {
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|e| err(format!("no randomness: {e}")))?;
    encrypt_with_nonce(conversation_key, plaintext, &nonce)
}

/// Decrypts a NIP-44 v2 payload.
///
/// # Errors
/// [`Error::Crypto`] naming the first failed check: a version other than 2 (`#` marks a
/// future encoding), a payload of the wrong size, bad base64, a MAC that does not match,
/// bad padding.
pub fn decrypt(conversation_key: &[u8; 32], payload: &str) -> Result<Vec<u8>> {
    if payload.starts_with('#') {
        return Err(err("unknown encryption version (payload starts with #)"));
    }
    // the smallest payload is 132 base64 characters; the largest holds a 2^32-1 byte
    // plaintext
    let max_raw = 1 + 32 + 6 + padded_len(MAX_PLAINTEXT) + 32;
    if payload.len() < 132 || payload.len() > max_raw.div_ceil(3) * 4 {
        return Err(err(format!("invalid payload size {}", payload.len())));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|e| err(format!("invalid base64: {e}")))?;
    if raw[0] != 2 {
        return Err(err(format!("unknown encryption version {}", raw[0])));
    }
    if raw.len() < 99 {
        return Err(err(format!("invalid data size {}", raw.len())));
    }
    let nonce: [u8; 32] = raw[1..33].try_into().expect("32");
    let (body, mac) = raw[33..].split_at(raw.len() - 33 - 32);
    let (key, iv, mac_key) = message_keys(conversation_key, &nonce);
    // compared in constant time (the hmac crate's verify, through `subtle`)
    let mut check = HmacSha256::new_from_slice(&mac_key).expect("HMAC takes keys of any length");
    check.update(&nonce);
    check.update(body);
    if check.verify_slice(mac).is_err() {
        return Err(err("invalid MAC"));
    }
    let mut padded = body.to_vec();
    ChaCha20::new(&key.into(), &iv.into()).apply_keystream(&mut padded);
    unpad(&padded)
}
