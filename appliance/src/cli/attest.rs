//! `meshnode attest verify`: an AMD SEV-SNP report or NVIDIA GPU evidence checked against
//! its certificates, the caller's policy and, when given, revocation data (AMD CRLs for
//! the SNP chain, NVIDIA OCSP responses for the GPU chain), printed as one JSON line (exit
//! 0 valid, 1 invalid — a revoked certificate included —, 2 malformed). The verdict says
//! `"revocation": "unchecked"` without revocation data, `"checked"` with it, and lists
//! what each CRL or response covered in `"revocation_checked"`.

use std::path::Path;

use fleetmesh_attest as tee;
use fleetmesh_attest::Error;
use fleetmesh_attest::crl::Crl;
use fleetmesh_attest::nvidia::{self, Evidence};
use fleetmesh_attest::ocsp::OcspResponse;
use fleetmesh_attest::snp::{Report, SnpPolicy, Tcb, Verified, verify as verify_snp};
use fleetmesh_attest::x509::{Certificate, RevocationChecked, parse_rfc3339};
use serde_json::{Value, json};

use crate::cli::{AttestCommand, AttestVerifyArgs, Outcome};

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::EvidenceMalformed(format!("{}: {e}", path.display())))
}

/// Each file of `paths` read with `parse`; a parse error names the file.
fn read_each<T>(
    paths: &[std::path::PathBuf],
    parse: fn(&[u8]) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    paths
        .iter()
        .map(|p| {
            let bytes = read(p)?;
            parse(&bytes).map_err(|e| match e {
                Error::EvidenceMalformed(m) => {
                    Error::EvidenceMalformed(format!("{}: {m}", p.display()))
                }
                other => other,
            })
        })
        .collect()
}

/// Adds the revocation verdict: `"unchecked"`, or `"checked"` and what was checked.
fn with_revocation(mut v: Value, checked: &[RevocationChecked]) -> Value {
    if checked.is_empty() {
        v["revocation"] = json!("unchecked");
    } else {
        v["revocation"] = json!("checked");
        v["revocation_checked"] = checked
            .iter()
            .map(|c| json!({"via": c.via, "signer": c.signer, "certificates": c.certificates}))
            .collect();
    }
    v
}

fn hex_bytes<const N: usize>(s: &str, what: &str) -> Result<[u8; N], Error> {
    hex::decode(s.trim())
        .ok()
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or_else(|| Error::EvidenceMalformed(format!("{what} must be {N} bytes of hex")))
}

fn min_tcb(s: &str) -> Result<Tcb, Error> {
    let parts: Vec<u8> = s
        .split(',')
        .map(|p| p.trim().parse::<u8>())
        .collect::<Result<_, _>>()
        .map_err(|_| Error::EvidenceMalformed(format!("--min-tcb {s:?}: four numbers 0–255")))?;
    let [bootloader, tee, snp, microcode] = parts[..] else {
        return Err(Error::EvidenceMalformed(format!(
            "--min-tcb {s:?}: bootloader,tee,snp,microcode"
        )));
    };
    Ok(Tcb {
        bootloader,
        tee,
        snp,
        microcode,
        fmc: 0,
    })
}

/// The `--chain` certificates and the time to check them at.
fn chain_and_now(a: &AttestVerifyArgs) -> Result<(Vec<Certificate>, i64), Error> {
    let text = String::from_utf8(read(&a.chain)?)
        .map_err(|_| Error::EvidenceMalformed("--chain must be PEM text".into()))?;
    let chain = Certificate::from_pem_bundle(&text)?;
    let now = match &a.now {
        Some(t) => parse_rfc3339(t)?,
        None => i64::try_from(fleetmesh_proto::unix_now()).unwrap_or(i64::MAX),
    };
    Ok((chain, now))
}

fn check_snp(a: &AttestVerifyArgs, snp: &Path) -> Result<Value, Error> {
    let report = Report::parse(&read(snp)?)?;
    let vcek_path = a
        .vcek
        .as_deref()
        .ok_or_else(|| Error::EvidenceMalformed("--snp needs --vcek".into()))?;
    let vcek = Certificate::from_der_or_pem(&read(vcek_path)?)?;
    let (chain, now) = chain_and_now(a)?;
    let crls = read_each(&a.crl, Crl::from_der_or_pem)?;
    let policy = SnpPolicy {
        report_data: a
            .report_data
            .as_deref()
            .map(|h| hex_bytes::<64>(h, "--report-data"))
            .transpose()?,
        measurement: a
            .measurement
            .as_deref()
            .map(|h| hex_bytes::<48>(h, "--measurement"))
            .transpose()?,
        min_tcb: a.min_tcb.as_deref().map(min_tcb).transpose()?,
        allow_debug: a.allow_debug,
        vmpl: a.vmpl,
    };
    let verified = verify_snp(&report, &vcek, &chain, now, &policy)?;
    let checked = tee::snp::check_revocation(&vcek, &chain, &crls, now)?;
    Ok(with_revocation(snp_json(&verified), &checked))
}

fn snp_json(v: &Verified) -> Value {
    let r = &v.report;
    json!({
        "valid": true,
        "evidence": "sev-snp",
        "product": format!("{:?}", v.product),
        "signing_key": v.key,
        "version": r.version,
        "vmpl": r.vmpl,
        "policy": format!("{:#x}", r.policy),
        "tcb": {"bootloader": v.tcb.bootloader, "tee": v.tcb.tee,
                "snp": v.tcb.snp, "microcode": v.tcb.microcode, "fmc": v.tcb.fmc},
        "measurement": hex::encode(r.measurement),
        "report_data": hex::encode(r.report_data),
        "chip_id": hex::encode(r.chip_id),
    })
}

fn check_nvidia(a: &AttestVerifyArgs, path: &Path) -> Result<Value, Error> {
    let e = Evidence::parse(&read(path)?)?;
    let (chain, now) = chain_and_now(a)?;
    let responses = read_each(&a.ocsp, OcspResponse::from_der)?;
    let nonce = a
        .nonce
        .as_deref()
        .map(|h| hex_bytes::<32>(h, "--nonce"))
        .transpose()?;
    nvidia::verify(&e, &chain, now, nonce.as_ref())?;
    let checked = nvidia::check_revocation(&chain, &responses, now)?;
    let mut rims = Vec::new();
    let mut differ = Vec::new();
    for p in &a.rim {
        let text = String::from_utf8(read(p)?)
            .map_err(|_| Error::EvidenceMalformed(format!("{}: not text", p.display())))?;
        let rim = nvidia::verify_rim(&text, now)?;
        let m = nvidia::mismatches(&e, &rim);
        if !m.is_empty() {
            differ.push(format!(
                "{} ({}): indices {m:?}",
                p.display(),
                rim.name.trim()
            ));
        }
        // a RIM describes one driver or VBIOS version: an older one's golden values do not
        // vouch for this GPU
        let (driver, vbios) = (e.driver_version(), e.vbios_version());
        let same = |v: &Option<String>| {
            v.as_deref()
                .is_some_and(|v| v.eq_ignore_ascii_case(&rim.version))
        };
        if !same(&driver) && !same(&vbios) {
            differ.push(format!(
                "{}: RIM version {} is neither the GPU's driver ({}) nor its VBIOS ({})",
                p.display(),
                rim.version,
                driver.as_deref().unwrap_or("?"),
                vbios.as_deref().unwrap_or("?")
            ));
        }
        rims.push(
            json!({"rim": p.display().to_string(), "name": rim.name.trim(),
                         "entries": rim.entries.len(), "mismatching_indices": m}),
        );
    }
    if !differ.is_empty() {
        return Err(Error::EvidenceInvalid(format!(
            "measurements differ from the RIM: {}",
            differ.join("; ")
        )));
    }
    let v = json!({
        "valid": true,
        "evidence": "nvidia-spdm",
        "device": chain[0].common_name,
        "nonce": hex::encode(e.nonce),
        "driver_version": e.driver_version(),
        "vbios_version": e.vbios_version(),
        "measurements": if rims.is_empty() { "unchecked" } else { "match" },
        "blocks": e.blocks.len(),
        "rims": rims,
    });
    Ok(with_revocation(v, &checked))
}

/// `meshnode attest verify|binding|collect`.
pub fn run(cmd: AttestCommand) -> anyhow::Result<Outcome> {
    match cmd {
        AttestCommand::Verify(a) => verify(&a),
        AttestCommand::Binding {
            model_digest,
            prompt_ids,
            output_ids,
            job_id,
        } => binding(&model_digest, &prompt_ids, &output_ids, &job_id),
        AttestCommand::Collect {
            report_data,
            nonce,
            gpu,
            out,
        } => match (report_data, nonce) {
            (Some(data), _) => collect(&data, &out),
            (None, Some(nonce)) => collect_gpu(&nonce, gpu, &out),
            (None, None) => unreachable!("clap requires one"),
        },
    }
}

/// Runs `meshnode attest verify`.
pub fn verify(a: &AttestVerifyArgs) -> anyhow::Result<Outcome> {
    let result = match (&a.snp, &a.nvidia) {
        (Some(snp), _) => check_snp(a, snp),
        (None, Some(nv)) => check_nvidia(a, nv),
        (None, None) => Err(Error::EvidenceMalformed("give --snp or --nvidia".into())),
    };
    match result {
        Ok(v) => {
            println!("{v}");
            Ok(Outcome::Ok)
        }
        Err(Error::EvidenceInvalid(reason)) => {
            println!("{}", json!({"valid": false, "reason": reason}));
            Ok(Outcome::Negative)
        }
        Err(e) => {
            let e = match e {
                Error::EvidenceMalformed(m) => m,
                other => other.to_string(),
            };
            println!("{}", json!({"valid": false, "error": e}));
            eprintln!("meshnode: malformed input: {e}");
            Ok(Outcome::Malformed)
        }
    }
}

/// Runs `meshnode attest binding`.
pub fn binding(
    model_digest: &str,
    prompt: &[u32],
    output: &[u32],
    job_id: &str,
) -> anyhow::Result<Outcome> {
    let digest = hex_bytes::<32>(model_digest, "--model-digest")?;
    let nonce = tee::binding_nonce(&digest, prompt, output, job_id.as_bytes());
    println!(
        "{}",
        json!({
            "nonce": hex::encode(nonce),
            "report_data": hex::encode(tee::snp_report_data(&nonce)),
        })
    );
    Ok(Outcome::Ok)
}

/// Runs `meshnode attest collect --nonce`: the GPU's SPDM evidence (hex, as `attest verify
/// --nvidia` reads it) in `out`, its certificate chain in `<out>.chain.pem`.
pub fn collect_gpu(nonce: &str, gpu: u32, out: &Path) -> anyhow::Result<Outcome> {
    let nonce = hex_bytes::<32>(nonce, "--nonce")?;
    let got = tee::gpu::collect_gpu_evidence(gpu, &nonce)?;
    let chain_path = {
        let mut p = out.as_os_str().to_owned();
        p.push(".chain.pem");
        std::path::PathBuf::from(p)
    };
    for (path, bytes) in [
        (out, hex::encode(&got.report).into_bytes()),
        (&chain_path, got.chain),
    ] {
        std::fs::write(path, bytes)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    println!(
        "{}",
        json!({"evidence": out.display().to_string(), "chain": chain_path.display().to_string(),
               "bytes": got.report.len()})
    );
    Ok(Outcome::Ok)
}

/// Runs `meshnode attest collect`.
pub fn collect(report_data: &str, out: &Path) -> anyhow::Result<Outcome> {
    let data = hex_bytes::<64>(report_data, "--report-data")?;
    let got = tee::collect_report(&data)?;
    let write = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    };
    write(out, &got.report)?;
    let mut said = json!({"report": out.display().to_string(), "bytes": got.report.len()});
    // the host's certificates beside the report, ready for `attest verify --snp`
    if let Some(t) = &got.certs
        && let (Some(key), Some(ask), Some(ark)) =
            (t.vcek.as_ref().or(t.vlek.as_ref()), &t.ask, &t.ark)
    {
        let name = |ext: &str| {
            let mut p = out.as_os_str().to_owned();
            p.push(ext);
            std::path::PathBuf::from(p)
        };
        let (key_path, chain_path) = (name(".vcek.der"), name(".chain.pem"));
        write(&key_path, key)?;
        write(
            &chain_path,
            (tee::to_pem(ask) + &tee::to_pem(ark)).as_bytes(),
        )?;
        said["vcek"] = json!(key_path.display().to_string());
        said["chain"] = json!(chain_path.display().to_string());
    }
    println!("{said}");
    Ok(Outcome::Ok)
}
