//! snarkjs's Groth16 JSON formats on BN254 (`"curve": "bn128"`): `verification_key.json`,
//! `proof.json` and `public.json`, read strictly and written as snarkjs writes them.
//!
//! Every number is a decimal string in canonical form (no sign, no leading zeros) and
//! below its modulus — p for coordinates, r for public inputs — because arkworks'
//! `from_str` would silently reduce a larger one. Every point must be on the curve and in
//! the prime-order subgroup (G2 included), in snarkjs's projective form with `z = 1`; the
//! point at infinity (`["0","1","0"]`) is refused where the protocol forbids it (the proof's
//! A, B, C and the key's α, β, γ, δ). Each rejection names the field and the reason.

use ark_bn254::{Bn254, Fq, Fq2, Fr, G1Affine, G2Affine};
use ark_ec::AffineRepr;
use ark_ff::{BigInteger, PrimeField};
use ark_groth16::{Proof, VerifyingKey};
use num_bigint::BigUint;
use serde_json::{Value, json};

use crate::error::{Error, Result, malformed};

/// A canonical decimal string's value.
fn decimal(field: &str, v: &Value) -> Result<BigUint> {
    let s = v
        .as_str()
        .ok_or_else(|| malformed(field, "must be a decimal string"))?;
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if !canonical {
        return Err(malformed(
            field,
            format!("{s:?} is not a canonical decimal (digits only, no leading zeros)"),
        ));
    }
    Ok(s.parse::<BigUint>().expect("checked digits"))
}

fn element<F: PrimeField>(field: &str, v: &Value, modulus_name: &str) -> Result<F> {
    let n = decimal(field, v)?;
    let modulus: BigUint = F::MODULUS.into();
    if n >= modulus {
        return Err(malformed(
            field,
            format!("not canonical: {n} is not below the field modulus {modulus_name}"),
        ));
    }
    Ok(F::from(n))
}

fn fq(field: &str, v: &Value) -> Result<Fq> {
    element(field, v, "p")
}

fn fr(field: &str, v: &Value) -> Result<Fr> {
    element(field, v, "r")
}

fn array<'v>(field: &str, v: &'v Value, len: usize) -> Result<&'v [Value]> {
    match v.as_array() {
        Some(a) if a.len() == len => Ok(a),
        _ => Err(malformed(field, format!("must be an array of {len}"))),
    }
}

/// A G1 point `[x, y, z]`.
fn g1(field: &str, v: &Value, allow_infinity: bool) -> Result<G1Affine> {
    let a = array(field, v, 3)?;
    let (x, y, z) = (
        fq(&format!("{field}[0]"), &a[0])?,
        fq(&format!("{field}[1]"), &a[1])?,
        fq(&format!("{field}[2]"), &a[2])?,
    );
    if z == Fq::from(0u8) {
        if !allow_infinity {
            return Err(malformed(
                field,
                "the point at infinity is not allowed here",
            ));
        }
        if (x, y) != (Fq::from(0u8), Fq::from(1u8)) {
            return Err(malformed(
                field,
                "infinity must be written [\"0\",\"1\",\"0\"]",
            ));
        }
        return Ok(G1Affine::identity());
    }
    if z != Fq::from(1u8) {
        return Err(malformed(
            format!("{field}[2]"),
            "z must be \"1\" (affine) or \"0\" (infinity)",
        ));
    }
    let p = G1Affine::new_unchecked(x, y);
    if !p.is_on_curve() {
        return Err(malformed(field, "not on the BN254 G1 curve"));
    }
    if !p.is_in_correct_subgroup_assuming_on_curve() {
        return Err(malformed(field, "not in the prime-order subgroup"));
    }
    Ok(p)
}

fn fq2(field: &str, v: &Value) -> Result<Fq2> {
    let a = array(field, v, 2)?;
    Ok(Fq2::new(
        fq(&format!("{field}[0]"), &a[0])?,
        fq(&format!("{field}[1]"), &a[1])?,
    ))
}

/// A G2 point `[[x0, x1], [y0, y1], [z0, z1]]`.
fn g2(field: &str, v: &Value, allow_infinity: bool) -> Result<G2Affine> {
    let a = array(field, v, 3)?;
    let (x, y, z) = (
        fq2(&format!("{field}[0]"), &a[0])?,
        fq2(&format!("{field}[1]"), &a[1])?,
        fq2(&format!("{field}[2]"), &a[2])?,
    );
    let (zero, one) = (Fq2::from(0u8), Fq2::from(1u8));
    if z == zero {
        if !allow_infinity {
            return Err(malformed(
                field,
                "the point at infinity is not allowed here",
            ));
        }
        if (x, y) != (zero, one) {
            return Err(malformed(
                field,
                "infinity must be written [[\"0\",\"0\"],[\"1\",\"0\"],[\"0\",\"0\"]]",
            ));
        }
        return Ok(G2Affine::identity());
    }
    if z != one {
        return Err(malformed(
            format!("{field}[2]"),
            "z must be [\"1\",\"0\"] (affine) or zero (infinity)",
        ));
    }
    let p = G2Affine::new_unchecked(x, y);
    if !p.is_on_curve() {
        return Err(malformed(
            field,
            "not on the BN254 G2 curve (swapped coordinate halves?)",
        ));
    }
    if !p.is_in_correct_subgroup_assuming_on_curve() {
        return Err(malformed(field, "not in the prime-order subgroup of G2"));
    }
    Ok(p)
}

fn header(v: &Value) -> Result<()> {
    if let Some(p) = v.get("protocol")
        && p != "groth16"
    {
        return Err(malformed(
            "protocol",
            format!("must be \"groth16\", found {p}"),
        ));
    }
    if let Some(c) = v.get("curve")
        && c != "bn128"
    {
        return Err(malformed(
            "curve",
            format!("must be \"bn128\" (BN254), found {c}"),
        ));
    }
    Ok(())
}

fn get<'v>(v: &'v Value, field: &str) -> Result<&'v Value> {
    v.get(field).ok_or_else(|| malformed(field, "missing"))
}

/// Reads a snarkjs `verification_key.json`.
///
/// # Errors
/// [`Error::Malformed`] naming the first bad field; `nPublic` must equal `IC.len() - 1`.
pub fn parse_vk(v: &Value) -> Result<VerifyingKey<Bn254>> {
    header(v)?;
    /// More public inputs than any circuit this node will meet; bounds the work a
    /// crafted key can cause.
    const MAX_PUBLIC: u64 = 1 << 20;
    let n_public = get(v, "nPublic")?
        .as_u64()
        .filter(|n| *n <= MAX_PUBLIC)
        .ok_or_else(|| {
            malformed(
                "nPublic",
                format!("must be an integer from 0 to {MAX_PUBLIC}"),
            )
        })? as usize;
    let ic_json = get(v, "IC")?
        .as_array()
        .ok_or_else(|| malformed("IC", "must be an array"))?;
    if ic_json.len() != n_public + 1 {
        return Err(malformed(
            "IC",
            format!(
                "has {} points; nPublic = {n_public} needs {}",
                ic_json.len(),
                n_public + 1
            ),
        ));
    }
    let gamma_abc_g1 = ic_json
        .iter()
        .enumerate()
        .map(|(i, p)| g1(&format!("IC[{i}]"), p, true))
        .collect::<Result<Vec<_>>>()?;
    Ok(VerifyingKey {
        alpha_g1: g1("vk_alpha_1", get(v, "vk_alpha_1")?, false)?,
        beta_g2: g2("vk_beta_2", get(v, "vk_beta_2")?, false)?,
        gamma_g2: g2("vk_gamma_2", get(v, "vk_gamma_2")?, false)?,
        delta_g2: g2("vk_delta_2", get(v, "vk_delta_2")?, false)?,
        gamma_abc_g1,
    })
}

/// Reads a snarkjs `proof.json`.
///
/// # Errors
/// [`Error::Malformed`] naming the first bad field.
pub fn parse_proof(v: &Value) -> Result<Proof<Bn254>> {
    header(v)?;
    Ok(Proof {
        a: g1("pi_a", get(v, "pi_a")?, false)?,
        b: g2("pi_b", get(v, "pi_b")?, false)?,
        c: g1("pi_c", get(v, "pi_c")?, false)?,
    })
}

/// Reads a snarkjs `public.json` (an array of decimal strings, each below r).
///
/// # Errors
/// [`Error::Malformed`] naming the first bad entry.
pub fn parse_public(v: &Value) -> Result<Vec<Fr>> {
    v.as_array()
        .ok_or_else(|| malformed("public", "must be an array of decimal strings"))?
        .iter()
        .enumerate()
        .map(|(i, x)| fr(&format!("public[{i}]"), x))
        .collect()
}

fn dec<F: PrimeField>(x: F) -> String {
    let n: BigUint = x.into_bigint().into();
    n.to_string()
}

fn g1_json(p: &G1Affine) -> Value {
    match p.xy() {
        Some((x, y)) => json!([dec(x), dec(y), "1"]),
        None => json!(["0", "1", "0"]),
    }
}

fn g2_json(p: &G2Affine) -> Value {
    match p.xy() {
        Some((x, y)) => json!([[dec(x.c0), dec(x.c1)], [dec(y.c0), dec(y.c1)], ["1", "0"]]),
        None => json!([["0", "0"], ["1", "0"], ["0", "0"]]),
    }
}

/// Writes a verifying key as snarkjs's `verification_key.json`.
pub fn vk_to_json(vk: &VerifyingKey<Bn254>) -> Value {
    use ark_ec::pairing::Pairing;
    let alphabeta = Bn254::pairing(vk.alpha_g1, vk.beta_g2).0;
    // snarkjs writes e(α, β) as 2 × 3 × 2 coordinates.
    let c = |x: ark_bn254::Fq6| {
        json!([
            [dec(x.c0.c0), dec(x.c0.c1)],
            [dec(x.c1.c0), dec(x.c1.c1)],
            [dec(x.c2.c0), dec(x.c2.c1)]
        ])
    };
    json!({
        "protocol": "groth16",
        "curve": "bn128",
        "nPublic": vk.gamma_abc_g1.len().saturating_sub(1),
        "vk_alpha_1": g1_json(&vk.alpha_g1),
        "vk_beta_2": g2_json(&vk.beta_g2),
        "vk_gamma_2": g2_json(&vk.gamma_g2),
        "vk_delta_2": g2_json(&vk.delta_g2),
        "vk_alphabeta_12": [c(alphabeta.c0), c(alphabeta.c1)],
        "IC": vk.gamma_abc_g1.iter().map(g1_json).collect::<Vec<_>>(),
    })
}

/// Writes a proof as snarkjs's `proof.json`.
pub fn proof_to_json(p: &Proof<Bn254>) -> Value {
    json!({
        "pi_a": g1_json(&p.a),
        "pi_b": g2_json(&p.b),
        "pi_c": g1_json(&p.c),
        "protocol": "groth16",
        "curve": "bn128",
    })
}

/// Writes public inputs as snarkjs's `public.json`.
pub fn public_to_json(public: &[Fr]) -> Value {
    Value::Array(public.iter().map(|x| Value::from(dec(*x))).collect())
}

/// A key's identity: its coordinates as bytes. Equal keys have equal ids; use it to group
/// proofs per key or to cache prepared keys.
pub fn vk_id(vk: &VerifyingKey<Bn254>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push_g1 = |p: &G1Affine| {
        if let Some((x, y)) = p.xy() {
            out.extend(x.into_bigint().to_bytes_le());
            out.extend(y.into_bigint().to_bytes_le());
        } else {
            out.push(0);
        }
    };
    push_g1(&vk.alpha_g1);
    for p in &vk.gamma_abc_g1 {
        push_g1(p);
    }
    for p in [&vk.beta_g2, &vk.gamma_g2, &vk.delta_g2] {
        if let Some((x, y)) = p.xy() {
            for c in [x.c0, x.c1, y.c0, y.c1] {
                out.extend(c.into_bigint().to_bytes_le());
            }
        }
    }
    out
}

/// Checks that `public` has exactly the number of inputs `vk` takes.
///
/// # Errors
/// [`Error::PublicCount`].
pub fn check_public_count(vk: &VerifyingKey<Bn254>, public: &[Fr]) -> Result<()> {
    let expected = vk.gamma_abc_g1.len().saturating_sub(1);
    if public.len() != expected {
        return Err(Error::PublicCount {
            expected,
            got: public.len(),
        });
    }
    Ok(())
}
