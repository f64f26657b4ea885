//! The JOSE that DIDComm v2 uses, and only that: JWE in general JSON serialization with
//! X25519 key agreement — ECDH-ES+A256KW (anoncrypt) and ECDH-1PU+A256KW (authcrypt, the
//! content tag bound into the key derivation as draft-madden-jose-ecdh-1pu-04 §2.3 says) —
//! over A256CBC-HS512, A256GCM or XC20P; JWS in general JSON serialization with EdDSA
//! (Ed25519) or ES256K (ECDSA on secp256k1, SHA-256, `r‖s`).
//!
//! Every length is checked before it is used; nothing here panics on input.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroizing;

use super::wire::{Jwe, Jws, Text};
use crate::{Error, Result};

/// `typ` of an encrypted message.
pub const TYP_ENCRYPTED: &str = "application/didcomm-encrypted+json";
/// `typ` of a signed message.
pub const TYP_SIGNED: &str = "application/didcomm-signed+json";
/// The anoncrypt key agreement algorithm.
pub const ALG_ANON: &str = "ECDH-ES+A256KW";
/// The authcrypt key agreement algorithm.
pub const ALG_AUTH: &str = "ECDH-1PU+A256KW";
/// The most recipients one JWE may name.
pub const MAX_RECIPIENTS: usize = 64;

pub(crate) fn err(reason: impl Into<String>) -> Error {
    Error::DidComm(reason.into())
}

/// Base64url without padding.
pub(crate) fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url (padding tolerated), naming `what` when it is not.
pub(crate) fn unb64(s: &str, what: &str) -> Result<Vec<u8>> {
    URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| err(format!("{what} is not base64url")))
}

pub(crate) fn random(n: usize) -> Result<Zeroizing<Vec<u8>>> {
    let mut b = Zeroizing::new(vec![0u8; n]);
    getrandom::fill(&mut b).map_err(|e| Error::Random(e.to_string()))?;
    Ok(b)
}

/// A content encryption algorithm (`enc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enc {
    /// AES-256-CBC with HMAC-SHA-512 (RFC 7518 §5.2.5): the one authcrypt allows.
    A256CbcHs512,
    /// AES-256-GCM.
    A256Gcm,
    /// XChaCha20-Poly1305.
    Xc20p,
}

impl Enc {
    /// Its JOSE name.
    pub fn name(self) -> &'static str {
        match self {
            Enc::A256CbcHs512 => "A256CBC-HS512",
            Enc::A256Gcm => "A256GCM",
            Enc::Xc20p => "XC20P",
        }
    }

    /// The algorithm a JOSE name stands for.
    pub fn parse(name: &str) -> Option<Enc> {
        [Enc::A256CbcHs512, Enc::A256Gcm, Enc::Xc20p]
            .into_iter()
            .find(|e| e.name() == name)
    }

    fn key_len(self) -> usize {
        match self {
            Enc::A256CbcHs512 => 64,
            Enc::A256Gcm | Enc::Xc20p => 32,
        }
    }

    fn iv_len(self) -> usize {
        match self {
            Enc::A256CbcHs512 => 16,
            Enc::A256Gcm => 12,
            Enc::Xc20p => 24,
        }
    }

    fn tag_len(self) -> usize {
        match self {
            Enc::A256CbcHs512 => 32,
            Enc::A256Gcm | Enc::Xc20p => 16,
        }
    }
}

type CbcMac = Hmac<Sha512>;

fn cbc_mac(mac_key: &[u8], aad: &[u8], iv: &[u8], ciphertext: &[u8]) -> CbcMac {
    let mut mac = <CbcMac as Mac>::new_from_slice(mac_key).expect("HMAC takes any key length");
    mac.update(aad);
    mac.update(iv);
    mac.update(ciphertext);
    mac.update(&((aad.len() as u64) * 8).to_be_bytes());
    mac
}

fn encrypt(enc: Enc, cek: &[u8], iv: &[u8], aad: &[u8], plain: &[u8]) -> (Vec<u8>, Vec<u8>) {
    match enc {
        Enc::A256CbcHs512 => {
            let (mac_key, enc_key) = cek.split_at(32);
            let ct = cbc::Encryptor::<aes::Aes256>::new(enc_key.into(), iv.into())
                .encrypt_padded_vec_mut::<Pkcs7>(plain);
            let tag = cbc_mac(mac_key, aad, iv, &ct).finalize().into_bytes()[..32].to_vec();
            (ct, tag)
        }
        Enc::A256Gcm => aead_seal::<aes_gcm::Aes256Gcm>(cek, iv, aad, plain),
        Enc::Xc20p => aead_seal::<chacha20poly1305::XChaCha20Poly1305>(cek, iv, aad, plain),
    }
}

/// An AEAD's ciphertext and detached tag; key and nonce lengths are the caller's to check.
fn aead_seal<A: AeadInPlace + KeyInit>(
    key: &[u8],
    iv: &[u8],
    aad: &[u8],
    plain: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let mut buf = plain.to_vec();
    let tag = A::new_from_slice(key)
        .expect("a key of the cipher's length")
        .encrypt_in_place_detached(iv.into(), aad, &mut buf)
        .expect("a message under the cipher's limit (64 GiB)");
    (buf, tag.to_vec())
}

fn aead_open<A: AeadInPlace + KeyInit>(
    key: &[u8],
    iv: &[u8],
    aad: &[u8],
    ct: &[u8],
    tag: &[u8],
) -> Option<Vec<u8>> {
    let mut buf = ct.to_vec();
    A::new_from_slice(key)
        .ok()?
        .decrypt_in_place_detached(iv.into(), aad, &mut buf, tag.into())
        .ok()?;
    Some(buf)
}

fn decrypt(enc: Enc, cek: &[u8], iv: &[u8], aad: &[u8], ct: &[u8], tag: &[u8]) -> Result<Vec<u8>> {
    let failed = || err(format!("the {} content does not decrypt (tag)", enc.name()));
    if cek.len() != enc.key_len() || iv.len() != enc.iv_len() || tag.len() != enc.tag_len() {
        return Err(err(format!(
            "{} wants a {}-byte key, a {}-byte iv and a {}-byte tag",
            enc.name(),
            enc.key_len(),
            enc.iv_len(),
            enc.tag_len()
        )));
    }
    match enc {
        Enc::A256CbcHs512 => {
            let (mac_key, enc_key) = cek.split_at(32);
            cbc_mac(mac_key, aad, iv, ct)
                .verify_truncated_left(tag)
                .map_err(|_| failed())?;
            cbc::Decryptor::<aes::Aes256>::new(enc_key.into(), iv.into())
                .decrypt_padded_vec_mut::<Pkcs7>(ct)
                .map_err(|_| err("A256CBC-HS512: bad padding"))
        }
        Enc::A256Gcm => aead_open::<aes_gcm::Aes256Gcm>(cek, iv, aad, ct, tag).ok_or_else(failed),
        Enc::Xc20p => aead_open::<chacha20poly1305::XChaCha20Poly1305>(cek, iv, aad, ct, tag)
            .ok_or_else(failed),
    }
}

fn len_prefixed(h: &mut Sha256, part: &[u8]) {
    h.update((part.len() as u32).to_be_bytes());
    h.update(part);
}

/// The Concat KDF (NIST SP 800-56A, RFC 7518 §4.6.2) for a 256-bit key-wrapping key:
/// `SHA-256(1 ‖ Z ‖ alg ‖ apu ‖ apv ‖ 256 [‖ cc_tag])`, each variable part length-prefixed.
fn kdf(z: &[u8], alg: &str, apu: &[u8], apv: &[u8], cc_tag: Option<&[u8]>) -> Zeroizing<[u8; 32]> {
    let mut h = Sha256::new();
    h.update(1u32.to_be_bytes());
    h.update(z);
    len_prefixed(&mut h, alg.as_bytes());
    len_prefixed(&mut h, apu);
    len_prefixed(&mut h, apv);
    h.update(256u32.to_be_bytes());
    if let Some(tag) = cc_tag {
        len_prefixed(&mut h, tag);
    }
    Zeroizing::new(h.finalize().into())
}

fn dh(secret: &x25519_dalek::StaticSecret, public: &[u8; 32]) -> Result<Zeroizing<[u8; 32]>> {
    let shared = secret.diffie_hellman(&x25519_dalek::PublicKey::from(*public));
    if !shared.was_contributory() {
        return Err(err("an X25519 key of small order"));
    }
    Ok(Zeroizing::new(shared.to_bytes()))
}

/// `apv`: SHA-256 of the recipients' key ids, sorted and joined with `.`.
fn apv(kids: &[&str]) -> Vec<u8> {
    let mut sorted = kids.to_vec();
    sorted.sort_unstable();
    Sha256::digest(sorted.join(".").as_bytes()).to_vec()
}

/// The sender of an authcrypt message: its key id and X25519 secret.
pub(crate) struct AuthSender<'a> {
    pub kid: &'a str,
    pub secret: &'a x25519_dalek::StaticSecret,
}

/// Encrypts `plain` to every recipient (`(kid, X25519 public key)`), anonymously or
/// authenticated by `sender`; returns the JWE.
pub(crate) fn seal(
    plain: &[u8],
    recipients: &[(String, [u8; 32])],
    sender: Option<AuthSender<'_>>,
    enc: Enc,
) -> Result<Value> {
    if recipients.is_empty() || recipients.len() > MAX_RECIPIENTS {
        return Err(err(format!("1 to {MAX_RECIPIENTS} recipients")));
    }
    if sender.is_some() && enc != Enc::A256CbcHs512 {
        return Err(err("authcrypt is A256CBC-HS512 only"));
    }
    let seed = random(32)?;
    let eph = x25519_dalek::StaticSecret::from(<[u8; 32]>::try_from(&seed[..]).expect("32"));
    let epk = x25519_dalek::PublicKey::from(&eph).to_bytes();
    let kids: Vec<&str> = recipients.iter().map(|(k, _)| k.as_str()).collect();
    let apv = apv(&kids);
    let alg = if sender.is_some() { ALG_AUTH } else { ALG_ANON };
    let mut header = json!({
        "typ": TYP_ENCRYPTED,
        "alg": alg,
        "enc": enc.name(),
        "apv": b64(&apv),
        "epk": {"kty": "OKP", "crv": "X25519", "x": b64(&epk)},
    });
    if let Some(s) = &sender {
        header["skid"] = json!(s.kid);
        header["apu"] = json!(b64(s.kid.as_bytes()));
    }
    let protected = b64(header.to_string().as_bytes());
    let cek = random(enc.key_len())?;
    let iv = random(enc.iv_len())?;
    let (ciphertext, tag) = encrypt(enc, &cek, &iv, protected.as_bytes(), plain);
    let mut wrapped = Vec::with_capacity(recipients.len());
    for (kid, public) in recipients {
        let mut z = dh(&eph, public)?.to_vec();
        let apu = sender.as_ref().map_or(&[][..], |s| s.kid.as_bytes());
        if let Some(s) = &sender {
            z.extend_from_slice(&*dh(s.secret, public)?);
        }
        let kek = kdf(&z, alg, apu, &apv, sender.as_ref().map(|_| &tag[..]));
        z.iter_mut().for_each(|b| *b = 0);
        let key = aes_kw::KekAes256::from(*kek)
            .wrap_vec(&cek)
            .map_err(|e| err(format!("A256KW: {e}")))?;
        wrapped.push(json!({"header": {"kid": kid}, "encrypted_key": b64(&key)}));
    }
    Ok(json!({
        "protected": protected,
        "recipients": wrapped,
        "iv": b64(&iv),
        "ciphertext": b64(&ciphertext),
        "tag": b64(&tag),
    }))
}

/// What opening a JWE found besides its plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The plaintext.
    pub plain: Vec<u8>,
    /// The recipient key id that opened it.
    pub kid: String,
    /// The authenticated sender's key id (authcrypt), `None` for anoncrypt.
    pub skid: Option<String>,
    /// The content encryption.
    pub enc: Enc,
}

/// A field that must be there, as a string.
fn need<'t>(field: &'t Option<Text<'_>>, name: &str, what: &str) -> Result<&'t str> {
    field
        .as_ref()
        .map(Text::as_str)
        .ok_or_else(|| err(format!("{what} has no {name:?} string")))
}

/// A JWE's protected header, as read.
#[derive(Deserialize)]
struct JweHeader<'a> {
    #[serde(borrow, default)]
    typ: Option<Text<'a>>,
    #[serde(borrow, default)]
    alg: Option<Text<'a>>,
    #[serde(borrow, default)]
    enc: Option<Text<'a>>,
    #[serde(borrow, default)]
    epk: Option<Epk<'a>>,
    #[serde(borrow, default)]
    apv: Option<Text<'a>>,
    #[serde(borrow, default)]
    apu: Option<Text<'a>>,
    #[serde(borrow, default)]
    skid: Option<Text<'a>>,
}

/// The ephemeral public key of a JWE's header.
#[derive(Deserialize)]
struct Epk<'a> {
    #[serde(borrow, default)]
    kty: Option<Text<'a>>,
    #[serde(borrow, default)]
    crv: Option<Text<'a>>,
    #[serde(borrow, default)]
    x: Option<Text<'a>>,
}

/// What a JWE's protected header and recipients say, checked without touching its
/// content (the iv, ciphertext and tag are neither decoded nor read).
pub(crate) struct Checked<'j> {
    /// The protected header as sent (the content's additional authenticated data).
    pub protected: &'j str,
    /// `ECDH-ES+A256KW` or `ECDH-1PU+A256KW`.
    pub alg: &'static str,
    /// The content encryption.
    pub enc: Enc,
    /// The ephemeral X25519 key.
    pub epk: [u8; 32],
    /// The authcrypt sender's key id; `None` for anoncrypt.
    pub skid: Option<String>,
    /// The recipients' key ids, in order.
    pub kids: Vec<&'j str>,
    /// SHA-256 of the sorted key ids.
    pub apv: Vec<u8>,
}

/// Checks a JWE's protected header (`typ`, `alg`, `enc`, `epk`, `apv`, an authcrypt
/// sender) and its recipients' key ids, before anything touches its content.
pub(crate) fn check<'j>(jwe: &'j Jwe<'_>) -> Result<Checked<'j>> {
    let protected = need(&jwe.protected, "protected", "the JWE")?;
    let header_bytes = unb64(protected, "the protected header")?;
    let header: JweHeader<'_> = serde_json::from_slice(&header_bytes)
        .map_err(|e| err(format!("the protected header is not JSON: {e}")))?;
    if let Some(typ) = &header.typ
        && typ.as_str() != TYP_ENCRYPTED
    {
        return Err(err(format!(
            "typ {:?} is not {TYP_ENCRYPTED}",
            typ.as_str()
        )));
    }
    let alg = need(&header.alg, "alg", "the protected header")?;
    let enc_name = need(&header.enc, "enc", "the protected header")?;
    let enc = Enc::parse(enc_name).ok_or_else(|| err(format!("unknown enc {enc_name:?}")))?;
    let epk = header
        .epk
        .as_ref()
        .ok_or_else(|| err("the protected header has no epk"))?;
    if epk.kty.as_ref().map(Text::as_str) != Some("OKP")
        || epk.crv.as_ref().map(Text::as_str) != Some("X25519")
    {
        return Err(err("epk is not an X25519 key (only X25519 is supported)"));
    }
    let epk: [u8; 32] = unb64(need(&epk.x, "x", "epk")?, "epk.x")?
        .try_into()
        .map_err(|_| err("epk.x is not 32 bytes"))?;
    let recipients = &jwe
        .recipients
        .as_ref()
        .ok_or_else(|| err("the JWE has no recipients"))?
        .0;
    if recipients.is_empty() || recipients.len() > MAX_RECIPIENTS {
        return Err(err(format!("1 to {MAX_RECIPIENTS} recipients")));
    }
    let mut kids = Vec::with_capacity(recipients.len());
    for r in recipients {
        let kid = r.header.as_ref().and_then(|h| h.kid.as_ref());
        kids.push(
            kid.map(Text::as_str)
                .ok_or_else(|| err("a recipient has no header.kid"))?,
        );
    }
    let apv = apv(&kids);
    if let Some(given) = &header.apv
        && unb64(given.as_str(), "apv")? != apv
    {
        return Err(err("apv does not match the recipients' key ids"));
    }
    let (alg, skid) = match alg {
        ALG_ANON => (ALG_ANON, None),
        ALG_AUTH => {
            if enc != Enc::A256CbcHs512 {
                return Err(err("authcrypt is A256CBC-HS512 only"));
            }
            let apu = unb64(need(&header.apu, "apu", "an authcrypt header")?, "apu")?;
            let apu = String::from_utf8(apu).map_err(|_| err("apu is not a key id"))?;
            match &header.skid {
                Some(skid) if skid.as_str() != apu => return Err(err("skid and apu disagree")),
                _ => (ALG_AUTH, Some(apu)),
            }
        }
        other => return Err(err(format!("unsupported alg {other:?}"))),
    };
    Ok(Checked {
        protected,
        alg,
        enc,
        epk,
        skid,
        kids,
        apv,
    })
}

/// Opens a JWE with the first recipient key id `ours` knows; `sender` gives an authcrypt
/// sender's X25519 public key by its key id. The header and recipients are checked
/// ([`check`]) before the content is decoded.
pub(crate) fn open(
    jwe: &Jwe<'_>,
    ours: &dyn Fn(&str) -> Option<x25519_dalek::StaticSecret>,
    sender: &dyn Fn(&str) -> Result<[u8; 32]>,
) -> Result<Opened> {
    let c = check(jwe)?;
    let (index, secret) = c
        .kids
        .iter()
        .enumerate()
        .find_map(|(i, kid)| ours(kid).map(|s| (i, s)))
        .ok_or_else(|| {
            err(format!(
                "no recipient key id is ours ({})",
                c.kids.join(", ")
            ))
        })?;
    let field = |value: &Option<Text<'_>>, name: &str| unb64(need(value, name, "the JWE")?, name);
    let (iv, ciphertext, tag) = (
        field(&jwe.iv, "iv")?,
        field(&jwe.ciphertext, "ciphertext")?,
        field(&jwe.tag, "tag")?,
    );
    let recipients = jwe.recipients.as_ref().map_or(&[][..], |r| &r.0[..]);
    let wrapped = unb64(
        need(
            &recipients[index].encrypted_key,
            "encrypted_key",
            "a recipient",
        )?,
        "encrypted_key",
    )?;
    let mut z = Zeroizing::new(dh(&secret, &c.epk)?.to_vec());
    if let Some(skid) = &c.skid {
        z.extend_from_slice(&*dh(&secret, &sender(skid)?)?);
    }
    let apu = c.skid.as_deref().map_or(&[][..], str::as_bytes);
    let kek = kdf(&z, c.alg, apu, &c.apv, c.skid.as_ref().map(|_| &tag[..]));
    let cek = Zeroizing::new(
        aes_kw::KekAes256::from(*kek)
            .unwrap_vec(&wrapped)
            .map_err(|_| err("the content key does not unwrap (wrong key or tampered)"))?,
    );
    let plain = decrypt(c.enc, &cek, &iv, c.protected.as_bytes(), &ciphertext, &tag)?;
    Ok(Opened {
        plain,
        kid: c.kids[index].to_owned(),
        skid: c.skid,
        enc: c.enc,
    })
}

/// A key that signs a JWS.
pub(crate) enum SignKey<'a> {
    /// EdDSA.
    Ed25519(&'a ed25519_dalek::SigningKey),
    /// ES256K.
    Secp256k1(secp256k1::SecretKey),
}

/// A key that verifies a JWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyKey {
    /// Ed25519 (EdDSA).
    Ed25519([u8; 32]),
    /// secp256k1 (ES256K).
    Secp256k1(secp256k1::PublicKey),
}

impl VerifyKey {
    /// The JWS `alg` this key verifies.
    pub fn alg(&self) -> &'static str {
        match self {
            VerifyKey::Ed25519(_) => "EdDSA",
            VerifyKey::Secp256k1(_) => "ES256K",
        }
    }
}

/// Signs `payload` as a one-signature JWS; `kid` goes in the unprotected header.
pub(crate) fn sign(payload: &[u8], kid: &str, key: &SignKey<'_>) -> Value {
    let alg = match key {
        SignKey::Ed25519(_) => "EdDSA",
        SignKey::Secp256k1(_) => "ES256K",
    };
    let protected = b64(json!({"typ": TYP_SIGNED, "alg": alg})
        .to_string()
        .as_bytes());
    let payload = b64(payload);
    let input = format!("{protected}.{payload}");
    let signature = match key {
        SignKey::Ed25519(k) => {
            use ed25519_dalek::Signer as _;
            k.sign(input.as_bytes()).to_bytes().to_vec()
        }
        SignKey::Secp256k1(k) => {
            let digest: [u8; 32] = Sha256::digest(input.as_bytes()).into();
            secp256k1::ecdsa::sign(secp256k1::Message::from_digest(digest), k)
                .serialize_compact()
                .to_vec()
        }
    };
    json!({
        "payload": payload,
        "signatures": [{
            "protected": protected,
            "signature": b64(&signature),
            "header": {"kid": kid},
        }],
    })
}

/// A verified JWS: its payload, the signing key id and the algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The payload.
    pub payload: Vec<u8>,
    /// The key id that signed.
    pub kid: String,
    /// `EdDSA` or `ES256K`.
    pub alg: &'static str,
}

/// A JWS signature's protected header, as read.
#[derive(Deserialize)]
struct JwsHeader<'a> {
    #[serde(borrow, default)]
    alg: Option<Text<'a>>,
    #[serde(borrow, default)]
    kid: Option<Text<'a>>,
}

/// Verifies a one-signature JWS; `key` finds the verification key by its key id.
pub(crate) fn verify(jws: &Jws<'_>, key: &dyn Fn(&str) -> Result<VerifyKey>) -> Result<Verified> {
    let payload = need(&jws.payload, "payload", "the JWS")?;
    let sigs = &jws
        .signatures
        .as_ref()
        .ok_or_else(|| err("the JWS has no signatures"))?
        .0;
    let [sig] = sigs.as_slice() else {
        return Err(err(format!(
            "a signed message carries one signature, not {}",
            sigs.len()
        )));
    };
    let protected = need(&sig.protected, "protected", "the signature")?;
    let header_bytes = unb64(protected, "the protected header")?;
    let header: JwsHeader<'_> = serde_json::from_slice(&header_bytes)
        .map_err(|e| err(format!("the JWS header is not JSON: {e}")))?;
    let kid = header
        .kid
        .as_ref()
        .or_else(|| sig.header.as_ref().and_then(|h| h.kid.as_ref()))
        .map(Text::as_str)
        .ok_or_else(|| err("the signature names no kid"))?;
    let alg = need(&header.alg, "alg", "the JWS header")?;
    let key = key(kid)?;
    if alg != key.alg() {
        return Err(err(format!(
            "alg {alg} does not fit key {kid} ({})",
            key.alg()
        )));
    }
    let signature = unb64(
        need(&sig.signature, "signature", "the signature")?,
        "signature",
    )?;
    let input = format!("{protected}.{payload}");
    let bad = || err(format!("the {alg} signature by {kid} does not verify"));
    match key {
        VerifyKey::Ed25519(public) => {
            let vk = ed25519_dalek::VerifyingKey::from_bytes(&public).map_err(|_| bad())?;
            let sig = ed25519_dalek::Signature::from_slice(&signature).map_err(|_| bad())?;
            vk.verify_strict(input.as_bytes(), &sig)
                .map_err(|_| bad())?;
        }
        VerifyKey::Secp256k1(public) => {
            let mut sig =
                secp256k1::ecdsa::Signature::from_compact(&signature).map_err(|_| bad())?;
            sig.normalize_s();
            let digest: [u8; 32] = Sha256::digest(input.as_bytes()).into();
            secp256k1::ecdsa::verify(&sig, secp256k1::Message::from_digest(digest), &public)
                .map_err(|_| bad())?;
        }
    }
    Ok(Verified {
        payload: unb64(payload, "the payload")?,
        kid: kid.to_owned(),
        alg: key.alg(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a256cbc_hs512_matches_rfc7518_appendix_b3() {
        // RFC 7518 Appendix B.3 (AES_256_CBC_HMAC_SHA_512)
        let k: Vec<u8> = (0u8..64).collect();
        let p = hex::decode(
            "41206369706865722073797374656d206d757374206e6f7420626520726571756972656420746f\
             206265207365637265742c20616e64206974206d7573742062652061626c6520746f2066616c6c\
             20696e746f207468652068616e6473206f662074686520656e656d7920776974686f757420696e\
             636f6e76656e69656e6365",
        )
        .unwrap();
        let iv = hex::decode("1af38c2dc2b96ffdd86694092341bc04").unwrap();
        let a = hex::decode(
            "546865207365636f6e64207072696e6369706c65206f66204175677573746520\
             4b6572636b686f666673",
        )
        .unwrap();
        let (c, t) = encrypt(Enc::A256CbcHs512, &k, &iv, &a, &p);
        assert_eq!(
            hex::encode(&t),
            "4dd3b4c088a7f45c216839645b2012bf2e6269a8c56a816dbc1b267761955bc5"
        );
        assert_eq!(hex::encode(&c[..16]), "4affaaadb78c31c5da4b1b590d10ffbd");
        assert_eq!(decrypt(Enc::A256CbcHs512, &k, &iv, &a, &c, &t).unwrap(), p);
        let mut bad = t.clone();
        bad[0] ^= 1;
        assert!(decrypt(Enc::A256CbcHs512, &k, &iv, &a, &c, &bad).is_err());
    }
}
