//! Generations: on the local batcher, under the quorum, or attested by this host's TEE;
//! and where an answer ends (stop strings, stop ids).

use super::*;
use fleetmesh_proto::Mode;

/// Where the first of `stops` begins in `text`.
pub(super) fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|st| text.find(st.as_str())).min()
}

/// Cuts `ids` where the request says the answer ends: after the first id whose text
/// completes a stop string (the text cut where that string began), or at a stop id (its
/// text left out); returns the ids kept, the text and the finish reason.
pub(super) fn cut(m: &Served, p: &Params, ids: &[u32]) -> (Vec<u32>, String, &'static str) {
    let decode = |ids: &[u32]| m.tokenizer.decode(ids).unwrap_or_default();
    if !p.stop.is_empty() {
        let full = decode(ids);
        if find_stop(&full, &p.stop).is_some() {
            let n = (1..=ids.len())
                .find(|n| find_stop(&decode(&ids[..*n]), &p.stop).is_some())
                .unwrap_or(ids.len());
            let mut text = decode(&ids[..n]);
            text.truncate(find_stop(&text, &p.stop).unwrap_or(text.len()));
            return (ids[..n].to_vec(), text, "stop");
        }
    }
    if let Some(k) = ids.iter().position(|i| p.stop_ids.contains(i)) {
        return (ids[..=k].to_vec(), decode(&ids[..k]), "stop");
    }
    (ids.to_vec(), decode(ids), "length")
}

/// Whether a generation whose ids so far are `ids` (decoded: `text`) has reached a stop id
/// or a stop string.
pub(super) fn stopped(ids: &[u32], text: &str, stop: &[String], stop_ids: &[u32]) -> bool {
    ids.last().is_some_and(|i| stop_ids.contains(i)) || find_stop(text, stop).is_some()
}

/// The stop test a generation runs after each step (it decodes only when there are stop
/// strings).
pub(super) fn stop_test(m: &Served, p: &Params) -> impl FnMut(&[u32]) -> bool + Send + 'static {
    let tokenizer = m.tokenizer.clone();
    let (stop, stop_ids) = (p.stop.clone(), p.stop_ids.clone());
    let (cancel, tokens) = (p.cancel.clone(), m.tokens.clone());
    move |ids: &[u32]| {
        tokens.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return true; // the client went away
        }
        let text = if stop.is_empty() {
            String::new()
        } else {
            tokenizer.decode(ids).unwrap_or_default()
        };
        stopped(ids, &text, &stop, &stop_ids)
    }
}

/// The batcher job of one prompt of `p`.
fn local_job(m: &Served, p: &Params, prompt: &[u32]) -> Job {
    Job {
        prompt: prompt.to_vec(),
        max_tokens: p.max_tokens,
        sampling: p.sampling.clone(),
        top_logprobs: p.logprobs.unwrap_or(0),
        on_step: Some(Box::new(stop_test(m, p))),
        constraint: constraint(m, p),
    }
}

/// A local transcript, cut at its stop and checked against the schema, ready to render.
fn generated(m: &Served, p: &Params, t: fleetmesh_inference::Transcript) -> Generated {
    let (ids, text, mut finish) = cut(m, p, &t.output_ids());
    let verdict = p.schema.as_ref().map(|g| {
        let (valid, v) = schema_verdict(g, &text);
        // the document's end ended the generation
        if valid {
            finish = "stop";
        }
        v
    });
    Generated {
        transcript_digest: t.digest(),
        steps: t.steps[..ids.len()].to_vec(),
        prompt: t.prompt,
        ids,
        text,
        finish,
        verdict,
        build: (m.engine.clone(), m.batcher.model().dtype().to_owned()),
    }
}

/// Every prompt of `p` on the local runtime, submitted together so the batcher decodes them
/// side by side (blocking: for the paths that also wait on remote executors).
pub(super) fn generate_local(p: &Params) -> Result<Vec<Generated>, Failure> {
    let m = &p.model;
    let tickets = p
        .prompts
        .iter()
        .map(|prompt| m.batcher.submit(local_job(m, p, prompt)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string(), "prompt"))?;
    tickets
        .iter()
        .map(|ticket| {
            let t = wait(ticket).map_err(|e| bad(e.to_string(), "prompt"))?;
            Ok(generated(m, p, t))
        })
        .collect()
}

/// [`generate_local`] without a thread waiting: the batcher answers each prompt through a
/// channel the request awaits.
pub(super) async fn generate_local_async(p: &Params) -> Result<Vec<Generated>, Failure> {
    let m = &p.model;
    let mut answers = Vec::with_capacity(p.prompts.len());
    for prompt in &p.prompts {
        let (tx, rx) = tokio::sync::oneshot::channel();
        m.batcher
            .submit_with(
                local_job(m, p, prompt),
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            )
            .map_err(|e| bad(e.to_string(), "prompt"))?;
        answers.push(rx);
    }
    let mut gens = Vec::with_capacity(answers.len());
    for rx in answers {
        let t = rx
            .await
            .map_err(|_| internal("the model's batching worker stopped"))?
            .map_err(|e| bad(e.to_string(), "prompt"))?;
        gens.push(generated(m, p, t));
    }
    Ok(gens)
}

/// A request's schema constraint for model `m` (ended by its stop ids where the document
/// is whole).
pub(super) fn constraint(m: &Served, p: &Params) -> Option<Constraint> {
    p.schema
        .as_ref()
        .map(|g| Constraint::new(g.clone(), m.vocab(), p.stop_ids.clone()))
}

/// `fleetmesh.verdict` of a `schema-bounds` generation: the `jsonschema` crate's check of
/// `text`.
pub(super) fn schema_verdict(g: &Grammar, text: &str) -> (bool, Value) {
    let v = g.validate(text);
    (
        v.valid,
        json!({"mode": Mode::SchemaBounds, "valid": v.valid, "errors": v.errors, "constrained": true}),
    )
}

/// `schema-bounds`: the constrained local generation; an output the schema does not accept
/// (cut by a stop string, a vocabulary without a needed byte) is 502 `schema_invalid`.
pub(super) fn generate_bounded(p: &Params) -> Result<Vec<Generated>, Failure> {
    schema_bounded(generate_local(p)?)
}

/// `schema-bounds`' rule on local generations: every output valid, else 502.
pub(super) fn schema_bounded(gens: Vec<Generated>) -> Result<Vec<Generated>, Failure> {
    if let Some(bad) = gens
        .iter()
        .find(|g| g.verdict.as_ref().is_some_and(|v| v["valid"] != true))
    {
        return Err(Failure {
            status: StatusCode::BAD_GATEWAY,
            message: "the output is not valid under the schema".into(),
            param: Some("response_format"),
            code: Some("schema_invalid"),
            extra: Some(json!({"verdict": bad.verdict, "text": bad.text})),
        });
    }
    Ok(gens)
}

/// The local generation with this host's SEV-SNP report over the one job binding
/// (`fleetmesh_attest::binding_nonce`: model digest, prompt ids, output ids, and the
/// request's `job` or else the response id as the job id).
pub(super) fn generate_attested(p: &Params) -> Result<Vec<Generated>, Failure> {
    use fleetmesh_attest as tee;
    // no generation is spent on a host that cannot attest it
    if let Err(e) = tee::tsm_available() {
        return Err(Failure {
            status: StatusCode::NOT_IMPLEMENTED,
            message: e.to_string(),
            param: Some("verification"),
            code: Some("tee_unavailable"),
            extra: None,
        });
    }
    let m = &p.model;
    let mut gens = generate_local(p)?;
    for g in &mut gens {
        // the job the buyer named (a job engine names its blinded job id), or the
        // response's id
        let prefix = if p.api == Api::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        };
        let job = p
            .job
            .clone()
            .unwrap_or_else(|| format!("{prefix}-{}", &hex::encode(g.transcript_digest)[..24]));
        // the one binding, for the host's report and the GPU's alike
        let nonce = tee::binding_nonce(&m.digest, &g.prompt, &g.ids, job.as_bytes());
        let data = tee::snp_report_data(&nonce);
        let got = tee::collect_report(&data).map_err(|e| Failure {
            status: StatusCode::BAD_GATEWAY,
            message: e.to_string(),
            param: Some("verification"),
            code: Some("tee_failed"),
            extra: None,
        })?;
        let mut verdict = json!({
            "mode": Mode::TeeAttestation,
            "evidence": "sev-snp",
            "job_id": job,
            "nonce": hex::encode(nonce),
            "report_data": hex::encode(data),
            "report": hex::encode(&got.report),
        });
        // the host's certificates, so the buyer needs no trip to AMD's KDS, and this
        // node's own check of its evidence with them
        if let Some(t) = &got.certs {
            let pem = |c: &Option<Vec<u8>>| c.as_deref().map(tee::to_pem);
            verdict["certificates"] = json!({
                "vcek": pem(&t.vcek), "vlek": pem(&t.vlek), "ask": pem(&t.ask), "ark": pem(&t.ark),
            });
            verdict["self_check"] = json!(match self_check(&got.report, t, &data) {
                Ok(()) => "valid".to_string(),
                Err(e) => e.to_string(),
            });
        }
        // a model on an NVIDIA GPU: the GPU's evidence over the same job, when the driver
        // has it (confidential-computing mode); otherwise why not
        if let Some(gpu) = fleetmesh_inference::model::gpu_index(m.batcher.model().device()) {
            verdict["gpu"] = match tee::gpu::collect_gpu_evidence(gpu, &nonce) {
                Ok(e) => json!({
                    "evidence": "nvidia-spdm",
                    "nonce": hex::encode(nonce),
                    "report": hex::encode(&e.report),
                    "chain": String::from_utf8_lossy(&e.chain),
                }),
                Err(e) => json!({"unavailable": e.to_string()}),
            };
        }
        g.verdict = Some(verdict);
    }
    Ok(gens)
}

/// This node's check of its own SEV-SNP report: signature, chain to AMD's root, TCB, and
/// the binding (debug policy is the buyer's call).
fn self_check(
    report: &[u8],
    certs: &fleetmesh_attest::snp::CertTable,
    data: &[u8; 64],
) -> fleetmesh_attest::Result<()> {
    use fleetmesh_attest::snp;
    let report = snp::Report::parse(report)?;
    let Some((key, chain)) = certs.chain()? else {
        return Err(fleetmesh_attest::Error::EvidenceInvalid(
            "the host's certificate table lacks the VCEK, ASK or ARK".into(),
        ));
    };
    let policy = snp::SnpPolicy {
        report_data: Some(*data),
        allow_debug: true,
        ..snp::SnpPolicy::default()
    };
    snp::verify(&report, &key, &chain, unix_now() as i64, &policy).map(|_| ())
}

pub(super) fn generate_quorum(s: &InferenceService, p: &Params) -> Result<Vec<Generated>, Failure> {
    let m = &p.model;
    let mut executors: Vec<&dyn Executor> = vec![&m.local];
    executors.extend(m.remotes.iter().map(|r| r as &dyn Executor));
    let req = ExecRequest {
        schema: None,
        prompt: p.prompts[0].clone(),
        max_tokens: p.max_tokens,
        stop_ids: p.stop_ids.clone(),
    };
    let counted = |outcome: &'static str| {
        metrics::counter!("fleetmesh_inference_quorum_total", "outcome" => outcome).increment(1);
    };
    let v = run_quorum(&executors, &req, &s.now().quorum).map_err(|e| {
        counted("not_enough_executors");
        Failure {
            status: StatusCode::BAD_REQUEST,
            message: format!("{e} for model {} (configure [[inference.executors]])", m.id),
            param: Some("verification"),
            code: Some("not_enough_executors"),
            extra: None,
        }
    })?;
    let verdict = v.to_json();
    counted(v.outcome.as_str());
    let Some(out) = v.output else {
        return Err(Failure {
            status: StatusCode::BAD_GATEWAY,
            message: "no two executors agreed; no output is accepted".into(),
            param: None,
            code: Some("no_quorum"),
            extra: Some(json!({"verdict": verdict})),
        });
    };
    let (ids, text, finish) = cut(m, p, &out.ids());
    // the digest of what is returned: the accepted output cut where the request ends it
    let mut kept = out.clone();
    kept.steps.truncate(ids.len());
    Ok(vec![Generated {
        transcript_digest: kept.transcript_digest(&req.prompt),
        prompt: req.prompt,
        steps: kept.steps,
        ids,
        text,
        finish,
        verdict: Some(verdict),
        build: (out.build.engine.clone(), out.build.dtype.clone()),
    }])
}
