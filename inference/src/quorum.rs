//! The `quasi-deterministic` verification mode: greedy decoding on two executors, a third
//! when they disagree, and the output two of them agree on.
//!
//! Greedy decoding is a deterministic function of the weights and the arithmetic, so two
//! honest executors of the same [`Build`] (model digest, engine, dtype) produce the same
//! ids, and any difference is a fault. Executors of different builds of one model (another
//! engine, a bf16 GPU beside an f32 CPU, a quantized copy: the same
//! [`Build::base_digest`]) compute slightly different logits and may part where the model
//! hardly prefers one token over another; such a divergence — both top-1/top-2 margins
//! below [`QuorumConfig::near_tie_epsilon`] at the first differing step — is a near-tie,
//! reported but never counted as fraud. An executor whose base digest is unknown gets no
//! such allowance, and one that states another model than the quorum's
//! ([`QuorumConfig::base_digest`]), or other digests than those pinned for it, takes no
//! part: [`Status::WrongModel`], flagged. Executors of the same dtype must also
//! agree on each step's logprob within [`QuorumConfig::logprob_tolerance`]: a provider
//! running other weights under a copied digest usually keeps the argmax and moves the
//! logprobs.
//!
//! [`run_quorum`] runs the first two executors side by side; if they agree the verdict is
//! [`Outcome::Unanimous`]. Otherwise it runs the third and accepts the output of the first
//! pair that agrees ([`Outcome::Majority`]), naming the odd executor with what it did
//! ([`Status`]); with no agreeing pair there is no accepted output
//! ([`Outcome::NoQuorum`]). Every comparison that was not an agreement is listed as a
//! [`Divergence`] with its step, both ids, margins and logprobs.

use serde_json::{Value, json};

use crate::executor::{Build, ExecRequest, Execution, Executor, hex32};
use crate::{Error, Result};

/// The quorum's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumConfig {
    /// A divergence between executors of different builds where both margins (log p(top-1)
    /// − log p(top-2), nats) are below this is a near-tie, not fraud. Default 0.1: above
    /// the logit drift of bf16 against f32 on the models we measured, far below a margin an
    /// honest executor overturns. Larger forgives more drift and more cheating.
    pub near_tie_epsilon: f64,
    /// Most difference (nats) allowed between two same-dtype executors' logprobs of the
    /// same token (a dtype nobody stated, `unknown`, is never held to it); `None` compares
    /// ids only. Default 1e-3: same-dtype engines on different
    /// hardware stay well inside it, other weights do not.
    pub logprob_tolerance: Option<f64>,
    /// The model every executor must serve: an execution stating another base digest is
    /// [`Status::WrongModel`]. `None` (default) takes the first executor's
    /// ([`Executor::build`]; the node's own model comes first).
    pub base_digest: Option<[u8; 32]>,
}

impl Default for QuorumConfig {
    fn default() -> QuorumConfig {
        QuorumConfig {
            near_tie_epsilon: 0.1,
            logprob_tolerance: Some(1e-3),
            base_digest: None,
        }
    }
}

/// How a pair of executions compares.
#[derive(Debug, Clone, PartialEq)]
pub enum Comparison {
    /// Same ids (and logprobs within tolerance where that applies).
    Agree,
    /// The ids part.
    Diverge(Divergence),
}

/// What two executions did where they first parted.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// The two executors.
    pub executors: (String, String),
    /// The first step (0-based output position) where they differ.
    pub step: usize,
    /// Each one's id there (`None`: it had stopped).
    pub ids: (Option<u32>, Option<u32>),
    /// Each one's top-1/top-2 margin there.
    pub margins: (Option<f64>, Option<f64>),
    /// Each one's logprob of its own token there.
    pub logprobs: (Option<f64>, Option<f64>),
    /// What kind of divergence it is.
    pub kind: DivergenceKind,
}

/// The kinds of [`Divergence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DivergenceKind {
    /// Different ids where one executor was sure: a fault.
    Token,
    /// Different ids where both were unsure, between different builds of one model: not a
    /// fault.
    NearTie,
    /// Same ids, logprobs further apart than the tolerance: a fault.
    Logprob,
    /// One output is a prefix of the other (one executor stopped earlier: another context
    /// limit, end-of-sequence handling): no output agrees, and nobody is accused.
    Length,
}

impl DivergenceKind {
    /// The name in the verdict's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            DivergenceKind::Token => "token",
            DivergenceKind::NearTie => "near-tie",
            DivergenceKind::Logprob => "logprob",
            DivergenceKind::Length => "length",
        }
    }
}

/// Compares two executions under `cfg`.
pub fn compare(a: &Execution, b: &Execution, cfg: &QuorumConfig) -> Comparison {
    fn at(e: &Execution, i: usize) -> Option<&crate::generate::Step> {
        e.steps.get(i)
    }
    let div = |step: usize, kind| {
        let (sa, sb) = (at(a, step), at(b, step));
        Comparison::Diverge(Divergence {
            executors: (a.executor.clone(), b.executor.clone()),
            step,
            ids: (sa.map(|s| s.id), sb.map(|s| s.id)),
            margins: (sa.map(|s| s.margin), sb.map(|s| s.margin)),
            logprobs: (sa.map(|s| s.logprob), sb.map(|s| s.logprob)),
            kind,
        })
    };
    let n = a.steps.len().max(b.steps.len());
    if let Some(step) = (0..n).find(|i| at(a, *i).map(|s| s.id) != at(b, *i).map(|s| s.id)) {
        let kind = match (at(a, step), at(b, step)) {
            (Some(x), Some(y))
                if !a.build.same_as(&b.build)
                    && a.build.same_model(&b.build)
                    && x.margin < cfg.near_tie_epsilon
                    && y.margin < cfg.near_tie_epsilon =>
            {
                DivergenceKind::NearTie
            }
            (Some(_), Some(_)) => DivergenceKind::Token,
            _ => DivergenceKind::Length,
        };
        return div(step, kind);
    }
    if let Some(tol) = cfg.logprob_tolerance
        && a.build.dtype == b.build.dtype
        && a.build.dtype != "unknown"
        && let Some(step) = (0..n).find(|i| (a.steps[*i].logprob - b.steps[*i].logprob).abs() > tol)
    {
        return div(step, DivergenceKind::Logprob);
    }
    Comparison::Agree
}

/// How the quorum ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The first two executors agreed.
    Unanimous,
    /// Two of three agreed.
    Majority,
    /// No two agreed: no output is accepted.
    NoQuorum,
}

impl Outcome {
    /// The name in the verdict's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unanimous => "unanimous",
            Outcome::Majority => "majority",
            Outcome::NoQuorum => "no-quorum",
        }
    }
}

/// What the verdict says of one executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Its output is the accepted one.
    Agreed,
    /// Its ids differ from the accepted output where the model was sure: flagged.
    Diverged,
    /// It differs from the accepted output only at a near-tie: not flagged.
    NearTie,
    /// Its output is a prefix of the accepted one or extends it: not flagged.
    Length,
    /// Same ids as the accepted output, logprobs beyond the tolerance: flagged.
    LogprobMismatch,
    /// It serves another model: it stated a base digest other than the quorum's, or
    /// digests other than those pinned for it. Flagged; its output is not compared.
    WrongModel,
    /// It returned no output (unreachable, timed out, refused).
    Failed,
    /// Not needed: the first two agreed.
    NotRun,
    /// No quorum was reached, so nothing can be said of it.
    Unsettled,
}

impl Status {
    /// The name in the verdict's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Agreed => "agreed",
            Status::Diverged => "diverged",
            Status::NearTie => "near-tie",
            Status::Length => "length",
            Status::LogprobMismatch => "logprob-mismatch",
            Status::WrongModel => "wrong-model",
            Status::Failed => "failed",
            Status::NotRun => "not-run",
            Status::Unsettled => "unsettled",
        }
    }

    /// Whether this status accuses the executor of a wrong output.
    pub fn is_flagged(self) -> bool {
        matches!(
            self,
            Status::Diverged | Status::LogprobMismatch | Status::WrongModel
        )
    }
}

/// One executor in the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutorReport {
    /// Its name.
    pub executor: String,
    /// What it says it runs.
    pub build: Build,
    /// Its transcript's digest, when it returned one.
    pub transcript_digest: Option<[u8; 32]>,
    /// What the verdict says of it.
    pub status: Status,
    /// Why it failed or was refused, when it was.
    pub error: Option<String>,
}

/// The quorum's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// How it ended.
    pub outcome: Outcome,
    /// The accepted execution (None without a quorum).
    pub output: Option<Execution>,
    /// Every executor, in the order given.
    pub executors: Vec<ExecutorReport>,
    /// Every comparison that was not an agreement.
    pub divergences: Vec<Divergence>,
}

impl Verdict {
    /// The executors the verdict accuses.
    pub fn flagged(&self) -> Vec<&str> {
        self.executors
            .iter()
            .filter(|r| r.status.is_flagged())
            .map(|r| r.executor.as_str())
            .collect()
    }

    /// The verdict as JSON (digests in hex), as receipts and the API carry it.
    pub fn to_json(&self) -> Value {
        let hex = hex32;
        json!({
            "mode": "quasi-deterministic",
            "outcome": self.outcome.as_str(),
            "accepted": self.output.as_ref().map(|o| o.executor.clone()),
            "executors": self.executors.iter().map(|r| json!({
                "executor": r.executor,
                "engine": r.build.engine,
                "dtype": r.build.dtype,
                "model_digest": r.build.model_digest.as_ref().map(hex),
                "base_model_digest": r.build.base_digest.as_ref().map(hex),
                "transcript_digest": r.transcript_digest.as_ref().map(hex),
                "status": r.status.as_str(),
                "flagged": r.status.is_flagged(),
                "error": r.error,
            })).collect::<Vec<_>>(),
            "divergences": self.divergences.iter().map(|d| json!({
                "executors": [d.executors.0, d.executors.1],
                "step": d.step,
                "kind": d.kind.as_str(),
                "token_ids": [d.ids.0, d.ids.1],
                "margins": [d.margins.0, d.margins.1],
                "logprobs": [d.logprobs.0, d.logprobs.1],
            })).collect::<Vec<_>>(),
        })
    }
}

/// What one executor's run came to.
enum Ran {
    /// An output of the quorum's model.
    Output(Execution),
    /// No output.
    Failed(String),
    /// Another model (its execution's build, when it returned one).
    WrongModel(Option<Build>, String),
}

impl Ran {
    fn output(&self) -> Option<&Execution> {
        match self {
            Ran::Output(e) => Some(e),
            _ => None,
        }
    }
}

/// Runs `req` on the first two of `executors` side by side and, if they disagree (or one
/// fails or serves another model), on the third; see the module docs for the verdict.
///
/// # Errors
/// [`Error::Request`] when fewer than three executors are given. Executors that fail are
/// reported in the verdict, not returned as errors.
pub fn run_quorum(
    executors: &[&dyn Executor],
    req: &ExecRequest,
    cfg: &QuorumConfig,
) -> Result<Verdict> {
    if executors.len() < 3 {
        return Err(Error::Request(format!(
            "quasi-deterministic verification needs three executors (two run, the third \
             settles a disagreement); {} configured",
            executors.len()
        )));
    }
    let ex = &executors[..3];
    let model = cfg.base_digest.or_else(|| ex[0].build().base_digest);
    let ran = |r: Result<Execution>| match r {
        Ok(e) => match (model, e.build.base_digest) {
            (Some(want), Some(stated)) if want != stated => {
                let why = format!(
                    "it states base_model_digest {}, the quorum's model is {}",
                    hex32(&stated),
                    hex32(&want)
                );
                Ran::WrongModel(Some(e.build), why)
            }
            _ => Ran::Output(e),
        },
        Err(Error::WrongModel { reason, .. }) => Ran::WrongModel(None, reason),
        Err(e) => Ran::Failed(e.to_string()),
    };
    let (ra, rb) = std::thread::scope(|s| {
        let a = s.spawn(|| ex[0].run(req));
        let rb = ex[1].run(req);
        let ra = a.join().unwrap_or_else(|_| {
            Err(Error::Request(format!(
                "executor {} panicked",
                ex[0].name()
            )))
        });
        (ra, rb)
    });
    let mut results: Vec<Option<Ran>> = vec![Some(ran(ra)), Some(ran(rb)), None];
    let mut divergences = Vec::new();
    let mut agree = |i: usize, j: usize, results: &[Option<Ran>]| {
        let output = |k: usize| results[k].as_ref().and_then(Ran::output);
        match (output(i), output(j)) {
            (Some(a), Some(b)) => match compare(a, b, cfg) {
                Comparison::Agree => true,
                Comparison::Diverge(d) => {
                    divergences.push(d);
                    false
                }
            },
            _ => false,
        }
    };
    let mut pair = agree(0, 1, &results).then_some((0, 1));
    let outcome_if_pair = if pair.is_some() {
        Outcome::Unanimous
    } else {
        results[2] = Some(ran(ex[2].run(req)));
        pair = [(0, 2), (1, 2)]
            .into_iter()
            .find(|(i, j)| agree(*i, *j, &results));
        Outcome::Majority
    };
    let ok = |i: usize| results[i].as_ref().and_then(Ran::output);
    let mut reports = Vec::with_capacity(3);
    for (i, e) in ex.iter().enumerate() {
        let status = match (&results[i], pair) {
            (None, _) => Status::NotRun,
            (Some(Ran::Failed(_)), _) => Status::Failed,
            (Some(Ran::WrongModel(..)), _) => Status::WrongModel,
            (Some(Ran::Output(_)), None) => Status::Unsettled,
            (Some(Ran::Output(_)), Some((a, b))) if i == a || i == b => Status::Agreed,
            (Some(Ran::Output(mine)), Some((a, _))) => {
                let accepted = ok(a).expect("an agreeing pair ran");
                match compare(accepted, mine, cfg) {
                    Comparison::Agree => Status::Agreed,
                    Comparison::Diverge(d) => {
                        if !divergences.iter().any(|x| same_pair(x, &d)) {
                            divergences.push(d.clone());
                        }
                        match d.kind {
                            DivergenceKind::Token => Status::Diverged,
                            DivergenceKind::NearTie => Status::NearTie,
                            DivergenceKind::Logprob => Status::LogprobMismatch,
                            DivergenceKind::Length => Status::Length,
                        }
                    }
                }
            }
        };
        let build = match &results[i] {
            Some(Ran::Output(x)) => x.build.clone(),
            Some(Ran::WrongModel(Some(b), _)) => b.clone(),
            _ => e.build(),
        };
        reports.push(ExecutorReport {
            executor: e.name().to_owned(),
            build,
            transcript_digest: ok(i).map(|x| x.transcript_digest(&req.prompt)),
            status,
            error: match &results[i] {
                Some(Ran::Failed(m) | Ran::WrongModel(_, m)) => Some(m.clone()),
                _ => None,
            },
        });
    }
    Ok(Verdict {
        outcome: if pair.is_some() {
            outcome_if_pair
        } else {
            Outcome::NoQuorum
        },
        output: pair.and_then(|(a, _)| ok(a).cloned()),
        executors: reports,
        divergences,
    })
}

fn same_pair(a: &Divergence, b: &Divergence) -> bool {
    let (x, y) = (&a.executors, &b.executors);
    (x.0 == y.0 && x.1 == y.1) || (x.0 == y.1 && x.1 == y.0)
}
