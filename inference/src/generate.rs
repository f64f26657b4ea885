//! Generation: greedy or seeded sampling over a [`Llama`], recorded as a [`Transcript`].
//!
//! Greedy decoding (temperature 0) takes the largest logit, the lowest id among equal ones,
//! so two honest executors with the same weights, engine and dtype produce the same ids.
//! Sampling is reproducible: the same seed, parameters and model give the same ids. Every
//! step records the chosen id, its logprob and the margin between the two most likely
//! tokens — what the quorum mode compares where executors diverge.

use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

use crate::model::{KvCache, Llama, argmax};
use crate::schema::{Constraint, TokenMask};
use crate::{Error, Result};

/// How to pick each token.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 is greedy; otherwise logits are divided by it before the softmax.
    pub temperature: f64,
    /// Keep the smallest set of most likely tokens whose probability reaches this (1 keeps
    /// all).
    pub top_p: f64,
    /// Keep at most this many most likely tokens (0 keeps all).
    pub top_k: usize,
    /// Seed of the draw.
    pub seed: u64,
}

impl Default for Sampling {
    /// Greedy.
    fn default() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        }
    }
}

impl Sampling {
    fn check(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::Request(format!(
                "temperature {} must be a finite number ≥ 0",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Request(format!(
                "top_p {} must be in (0, 1]",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The token id.
    pub id: u32,
    /// Its log-probability under the model (before temperature).
    pub logprob: f64,
    /// log p(top-1) − log p(top-2): how clear the model's first choice was.
    pub margin: f64,
    /// The most likely ids with their logprobs, most likely first (as many as asked for).
    pub top: Vec<(u32, f64)>,
}

/// A generation's record.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// SHA-256 of the weight files ([`crate::model::model_digest`]).
    pub model_digest: [u8; 32],
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    /// Each generated token.
    pub steps: Vec<Step>,
}

impl Transcript {
    /// The generated ids.
    pub fn output_ids(&self) -> Vec<u32> {
        self.steps.iter().map(|s| s.id).collect()
    }

    /// SHA-256 over the model digest, then the prompt ids and the output ids, each list
    /// as a little-endian u32 count followed by little-endian u32 ids.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.model_digest);
        for ids in [self.prompt.clone(), self.output_ids()] {
            h.update((ids.len() as u32).to_le_bytes());
            for id in ids {
                h.update(id.to_le_bytes());
            }
        }
        h.finalize().into()
    }
}

/// Log-softmax of `logits` in f64.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b)) as f64;
    let lse = max
        + logits
            .iter()
            .map(|v| (*v as f64 - max).exp())
            .sum::<f64>()
            .ln();
    logits.iter().map(|v| *v as f64 - lse).collect()
}

/// Draws from `logits` under `s` with `rng` (greedy when the temperature is 0), among the
/// ids `allowed` holds when a constraint gives them (the others as if their logits were
/// −∞, without writing them).
fn pick(
    logits: &[f32],
    allowed: Option<&TokenMask>,
    s: &Sampling,
    rng: &mut rand::rngs::StdRng,
) -> u32 {
    let Some(allowed) = allowed else {
        if s.temperature == 0.0 {
            return argmax(logits);
        }
        return draw(logits, 0..logits.len() as u32, s, rng);
    };
    let ids = allowed.ids().filter(|i| (*i as usize) < logits.len());
    if s.temperature == 0.0 {
        // the first of the highest, as `argmax` over the masked logits
        return ids
            .reduce(|best, i| {
                if logits[i as usize] > logits[best as usize] {
                    i
                } else {
                    best
                }
            })
            .unwrap_or(0);
    }
    draw(logits, ids, s, rng)
}

/// Draws one of `ids` (ascending) by its logit under `s`'s temperature, top-k and top-p.
fn draw(
    logits: &[f32],
    ids: impl Iterator<Item = u32>,
    s: &Sampling,
    rng: &mut rand::rngs::StdRng,
) -> u32 {
    let ids: Vec<u32> = ids.collect();
    let scaled: Vec<f32> = ids
        .iter()
        .map(|i| (logits[*i as usize] as f64 / s.temperature) as f32)
        .collect();
    let lp = log_softmax(&scaled);
    // most likely first, ties by the lower id; −∞ is never drawn
    let mut order: Vec<usize> = (0..lp.len())
        .filter(|k| lp[*k] > f64::NEG_INFINITY)
        .collect();
    order.sort_by(|a, b| lp[*b].total_cmp(&lp[*a]).then(a.cmp(b)));
    if s.top_k > 0 {
        order.truncate(s.top_k);
    }
    let mut kept = Vec::with_capacity(order.len());
    let mut mass = 0.0;
    for k in order {
        kept.push(k);
        mass += lp[k].exp();
        if mass >= s.top_p {
            break;
        }
    }
    let mut u = rng.r#gen::<f64>() * mass;
    for &k in &kept {
        u -= lp[k].exp();
        if u < 0.0 {
            return ids[k];
        }
    }
    // every logit NaN or −∞ (a broken model): the first candidate, not a panic
    kept.last()
        .map_or(ids.first().copied().unwrap_or(0), |k| ids[*k])
}

/// Runs `prompt`, then generates up to `max_tokens` ids (stopping after any id in `stop`),
/// recording each step. `model_digest` is copied into the transcript.
///
/// # Errors
/// [`Error::Request`] for bad sampling parameters or as [`Llama::forward`].
pub fn generate(
    model: &Llama,
    model_digest: [u8; 32],
    prompt: &[u32],
    max_tokens: usize,
    stop: &[u32],
    sampling: &Sampling,
) -> Result<Transcript> {
    let mut done = |ids: &[u32]| ids.last().is_some_and(|id| stop.contains(id));
    generate_with(
        model,
        model_digest,
        prompt,
        max_tokens,
        sampling,
        0,
        &mut done,
    )
}

/// [`generate`] with a stop test run on the ids generated so far after each step (stop
/// strings are checked this way), and the `top_logprobs` most likely alternatives
/// recorded per step. Generation also ends when the model's context is full.
///
/// # Errors
/// As [`generate`].
pub fn generate_with(
    model: &Llama,
    model_digest: [u8; 32],
    prompt: &[u32],
    max_tokens: usize,
    sampling: &Sampling,
    top_logprobs: usize,
    done: &mut dyn FnMut(&[u32]) -> bool,
) -> Result<Transcript> {
    let mut d = Decoding::new(sampling, top_logprobs)?;
    let mut cache = KvCache::default();
    let mut logits = model.forward(prompt, &mut cache)?;
    while d.steps.len() < max_tokens {
        let Some(id) = d.push(&logits) else { break };
        if done(&d.ids) || d.finished() || d.steps.len() == max_tokens || !model.has_room(&cache) {
            break;
        }
        logits = model.forward(&[id], &mut cache)?;
    }
    Ok(d.into_transcript(model_digest, prompt))
}

/// One generation's sampler: its random state, its schema constraint if any, and the
/// steps taken so far. Feed it each position's logits with [`Decoding::push`];
/// [`generate_with`] and the batcher both decode through it, so a token is chosen and
/// recorded the same way everywhere.
#[derive(Debug)]
pub struct Decoding {
    sampling: Sampling,
    rng: rand::rngs::StdRng,
    top_logprobs: usize,
    steps: Vec<Step>,
    ids: Vec<u32>,
    constraint: Option<Constraint>,
}

impl Decoding {
    /// A sampler for `sampling`, recording `top_logprobs` alternatives per step.
    ///
    /// # Errors
    /// [`Error::Request`] for bad sampling parameters.
    pub fn new(sampling: &Sampling, top_logprobs: usize) -> Result<Decoding> {
        sampling.check()?;
        Ok(Decoding {
            sampling: sampling.clone(),
            rng: rand::rngs::StdRng::seed_from_u64(sampling.seed),
            top_logprobs,
            steps: Vec::new(),
            ids: Vec::new(),
            constraint: None,
        })
    }

    /// Constrains every token from now on to `c` (a JSON Schema), with `budget` tokens to
    /// finish the document in.
    ///
    /// # Errors
    /// [`Error::Request`] when the schema's shortest document does not fit the budget.
    pub fn constrain(&mut self, mut c: Constraint, budget: usize) -> Result<()> {
        c.start(budget)?;
        self.constraint = Some(c);
        Ok(())
    }

    /// Whether the constraint ends the generation here (the document is whole, or no
    /// token can continue it).
    pub fn finished(&self) -> bool {
        self.constraint.as_ref().is_some_and(Constraint::finished)
    }

    /// The constraint, if any (to ask whether it got stuck).
    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }

    /// Picks the next token from `logits` (among those the constraint allows), records the
    /// step and returns the id; None when the constraint allows no token (the generation
    /// ends). Logprobs, margins and alternatives are the model's, before masking (as
    /// vLLM's raw logprobs).
    pub fn push(&mut self, logits: &[f32]) -> Option<u32> {
        let id = match self.constraint.as_mut() {
            None => pick(logits, None, &self.sampling, &mut self.rng),
            Some(c) => {
                let id = pick(
                    logits,
                    Some(c.allow(logits.len())?),
                    &self.sampling,
                    &mut self.rng,
                );
                c.advance(id);
                id
            }
        };
        let lp = log_softmax(logits);
        let mut order: Vec<usize> = (0..lp.len()).collect();
        let keep = self.top_logprobs.max(2).min(lp.len());
        order.select_nth_unstable_by(keep - 1, |a, b| lp[*b].total_cmp(&lp[*a]).then(a.cmp(b)));
        order.truncate(keep);
        order.sort_by(|a, b| lp[*b].total_cmp(&lp[*a]).then(a.cmp(b)));
        let margin = if order.len() > 1 {
            lp[order[0]] - lp[order[1]]
        } else {
            f64::INFINITY
        };
        self.steps.push(Step {
            id,
            logprob: lp[id as usize],
            margin,
            top: order
                .iter()
                .take(self.top_logprobs)
                .map(|i| (*i as u32, lp[*i]))
                .collect(),
        });
        self.ids.push(id);
        Some(id)
    }

    /// The ids chosen so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The steps taken so far.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The finished record.
    pub fn into_transcript(self, model_digest: [u8; 32], prompt: &[u32]) -> Transcript {
        Transcript {
            model_digest,
            prompt: prompt.to_vec(),
            steps: self.steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drawing among a constraint's allowed ids is drawing from the logits with every
    /// other id set to −∞ (as [`TokenMask::apply`] writes them): the same id for the same
    /// seed, greedy or sampled, ties and all.
    #[test]
    fn drawing_among_allowed_ids_equals_drawing_from_masked_logits() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let samplings = [
            Sampling::default(),
            Sampling {
                temperature: 0.7,
                top_p: 0.9,
                top_k: 0,
                seed: 3,
            },
            Sampling {
                temperature: 1.3,
                top_p: 1.0,
                top_k: 5,
                seed: 4,
            },
            Sampling {
                temperature: 1.0,
                top_p: 1e-9,
                top_k: 0,
                seed: 5,
            },
        ];
        for round in 0..300 {
            let len = 1 + (next() % 300) as usize;
            // few distinct values, so ties are common
            let logits: Vec<f32> = (0..len).map(|_| (next() % 7) as f32 * 0.5 - 1.0).collect();
            let mut mask = TokenMask::new(len);
            let every = 1 + next() % 5;
            for id in 0..len as u32 {
                if next() % every == 0 {
                    mask.insert(id);
                }
            }
            if mask.count() == 0 {
                mask.insert((next() % len as u64) as u32);
            }
            let mut masked = logits.clone();
            mask.apply(&mut masked);
            for s in &samplings {
                let seed = s.seed + round;
                let mut a = rand::rngs::StdRng::seed_from_u64(seed);
                let mut b = rand::rngs::StdRng::seed_from_u64(seed);
                let among = pick(&logits, Some(&mask), s, &mut a);
                assert!(
                    mask.contains(among),
                    "round {round}: {among} is not allowed"
                );
                assert_eq!(
                    among,
                    pick(&masked, None, s, &mut b),
                    "round {round}, {s:?}"
                );
            }
        }
        // logits a broken model made (NaN): an allowed id all the same, no panic
        let mut mask = TokenMask::new(10);
        mask.insert(3);
        mask.insert(7);
        for s in &samplings {
            let mut rng = rand::rngs::StdRng::seed_from_u64(1);
            assert_eq!(pick(&[f32::NAN; 10], Some(&mask), s, &mut rng), 3, "{s:?}");
        }
    }
}
