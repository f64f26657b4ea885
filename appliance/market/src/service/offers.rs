//! The market between asks and jobs: a provider's [`Terms`] (kind 30812) made from what
//! its job service sells now, its quote for an ask it can fill ([`JobService::quote`]) sent
//! as a compute/1.0 `offer` ([`offer_message`]), and the buyer's side — an offer read
//! back and checked against its ask ([`Offer::read`]) and offers ranked ([`rank`]).
//!
//! The provider says the same things in its terms, its offer and its answer to the job:
//! [`JobService::sells`] is the one check of engine and mode all three make.

use std::collections::{BTreeMap, HashMap};

use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::provider::Terms;
use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde_json::{Value, json};

use super::{JobLimits, JobService, Price, answers, offered_modes};
use crate::{Refusal, refuse};

impl JobLimits {
    /// The terms a node with these limits publishes (the `mints`, `models`, `circuits` and
    /// `regions` are the caller's to fill): the engines and modes it runs, each engine
    /// only with the modes that verify it, its prices and its per-job maxima.
    pub fn terms(&self) -> Terms {
        let modes = self
            .modes
            .iter()
            .copied()
            .filter(|m| self.engines.iter().any(|e| offered_modes(*e).contains(m)))
            .collect();
        Terms {
            engines: self.engines.clone(),
            modes,
            prices: self
                .prices
                .iter()
                .map(|(e, p)| (e.clone(), serde_json::to_value(p).unwrap_or_default()))
                .collect(),
            limits: BTreeMap::from([
                ("fuel".to_owned(), self.max_fuel),
                ("tokens".to_owned(), self.max_tokens),
                ("wall_secs".to_owned(), self.max_wall_secs),
                ("memory_bytes".to_owned(), self.max_memory_bytes),
                ("output_bytes".to_owned(), self.max_output_bytes),
                ("input_bytes".to_owned(), self.max_input_bytes),
            ]),
            mints: Vec::new(),
            models: Vec::new(),
            circuits: Vec::new(),
            regions: Vec::new(),
        }
    }
}

/// A bid (`{"amount", "unit"}`) in whole sats, rounded down (a buyer bids at most this);
/// `None` in any other unit.
pub fn bid_sat(bid: &Value) -> Option<u64> {
    let amount = bid["amount"].as_u64()?;
    match bid["unit"].as_str()? {
        "sat" => Some(amount),
        "msat" => Some(amount / 1000),
        _ => None,
    }
}

/// Whether a provider with `terms` would offer for `ask`, by the checks a provider's quote
/// makes that its terms show (engine and mode, the token limit, its price on the ask's
/// limits against the bid): what a buyer expects before offers come. A price it cannot
/// read counts as an offer expected.
pub fn terms_would_offer(terms: &Terms, ask: &Ask) -> bool {
    if !terms.sells(ask.engine, ask.mode) || !offered_modes(ask.engine).contains(&ask.mode) {
        return false;
    }
    if let (Some(tokens), Some(most)) = (
        ask.content["limits"]["tokens"].as_u64(),
        terms.limits.get("tokens"),
    ) && tokens > *most
    {
        return false;
    }
    let Some(price) = terms.prices.get(ask.engine.as_str()) else {
        return true;
    };
    let Ok(price) = serde_json::from_value::<Price>(price.clone()) else {
        return true;
    };
    match super::payments::price_sat(&price, &ask.content["limits"]) {
        Some(need) => bid_sat(&ask.content["bid"]).is_some_and(|bid| bid >= need),
        None => false,
    }
}

impl JobService {
    /// Whether this node runs the ask's engine under its mode now.
    ///
    /// # Errors
    /// `unsupported-engine`, `unsupported-mode`.
    pub fn sells(&self, ask: &Ask) -> Result<(), Refusal> {
        let limits = self.limits();
        if !limits.engines.contains(&ask.engine) {
            return Err(refuse(
                "unsupported-engine",
                format!("this node does not run {} jobs now", ask.engine),
            ));
        }
        if !limits.modes.contains(&ask.mode) {
            return Err(refuse(
                "unsupported-mode",
                format!("this node does not offer {} now", ask.mode),
            ));
        }
        if !offered_modes(ask.engine).contains(&ask.mode) {
            let modes: Vec<&str> = offered_modes(ask.engine)
                .iter()
                .map(|m| m.as_str())
                .collect();
            return Err(refuse(
                "unsupported-mode",
                format!(
                    "{} jobs are verified by {}, not {}",
                    ask.engine,
                    modes.join(" or "),
                    ask.mode
                ),
            ));
        }
        Ok(())
    }

    /// The hash a delivery-mode ask's escrow may be locked to here (see
    /// [`super::payments::Payments::delivery_lock`]).
    pub fn delivery_lock(&self, ask: &Ask) -> Option<String> {
        self.payments.delivery_lock(ask)
    }

    /// What this node would charge at most for the ask's job, in sats (0 where it does not
    /// price the engine): the price the offer names.
    ///
    /// # Errors
    /// As [`JobService::sells`]; `limit-exceeded` for more tokens than it generates;
    /// `payment-required` when the ask's limits give its price no bound; `bid-too-low`
    /// when the bid is under the price.
    pub fn quote(&self, ask: &Ask) -> Result<u64, Refusal> {
        self.sells(ask)?;
        let limits = self.limits();
        if let Some(tokens) = ask.content["limits"]["tokens"].as_u64()
            && tokens > limits.max_tokens
        {
            return Err(refuse(
                "limit-exceeded",
                format!(
                    "the ask's {tokens} tokens are above this node's {}",
                    limits.max_tokens
                ),
            ));
        }
        let Some(need) = self.need_sat(ask)? else {
            return Ok(0);
        };
        match bid_sat(&ask.content["bid"]) {
            Some(bid) if bid >= need => Ok(need),
            _ => Err(refuse(
                "bid-too-low",
                format!(
                    "this node charges up to {need} sat for it; the bid is {}",
                    ask.content["bid"]
                ),
            )),
        }
    }
}

/// The compute/1.0 `offer` for `ask` at `price_sat`, made under the terms event `terms`,
/// with the hash its escrow may be locked to (`htlc`, delivery mode).
pub fn offer_message(ask: &Ask, price_sat: u64, terms: Option<&str>, htlc: Option<&str>) -> Value {
    let mut offer = json!({
        "protocol": "compute/1.0",
        "type": "offer",
        "ask": ask.event.id_hex(),
        "engine": ask.engine,
        "mode": ask.mode,
        "price": {"amount": price_sat, "unit": "sat"},
    });
    if let Some(t) = terms {
        offer["terms"] = json!(t);
    }
    if let Some(h) = htlc {
        offer["htlc"] = json!(h);
    }
    offer
}

/// An offer a buyer received for its ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The provider's key (x-only, hex): the sender of the gift wrap it came in.
    pub provider: String,
    /// What it charges at most, in sats.
    pub price_sat: u64,
    /// The terms event it names, if any.
    pub terms: Option<String>,
    /// The hash its escrow is to be locked to (NUT-14), if it names one.
    pub htlc: Option<String>,
}

impl Offer {
    /// Reads `message` from `provider` as an offer for `ask`: the compute/1.0 schema, the
    /// `offer` type, the ask's id, engine and mode, a price in sats within the bid.
    ///
    /// # Errors
    /// `schema`, `mismatch` (another ask, engine or mode), `bid-too-low`.
    pub fn read(provider: &str, message: &Value, ask: &Ask) -> Result<Offer, Refusal> {
        SchemaSet::embedded()
            .validate(&SchemaKey::Payload("compute/1.0".into()), message)
            .map_err(|e| refuse("schema", e.to_string()))?;
        if message["type"] != "offer" {
            return Err(refuse("schema", "not an offer"));
        }
        answers(message, ask, "offer")?;
        let price_sat = bid_sat(&message["price"])
            .filter(|_| message["price"]["unit"] == "sat")
            .ok_or_else(|| refuse("schema", "an offer's price is in sat"))?;
        if bid_sat(&ask.content["bid"]).is_some_and(|bid| price_sat > bid) {
            return Err(refuse(
                "bid-too-low",
                format!("the offer asks {price_sat} sat, above the bid"),
            ));
        }
        Ok(Offer {
            provider: provider.to_owned(),
            price_sat,
            terms: message["terms"].as_str().map(str::to_owned),
            htlc: message["htlc"].as_str().map(str::to_owned),
        })
    }
}

/// Orders `offers` the way a buyer takes them: cheapest first, then by the provider's
/// standing (`standing`: provider → rank 0–100, from the buyer's own ledger; a provider
/// without one counts as 50), then in the order they came. One offer per provider (its
/// first).
pub fn rank(offers: Vec<Offer>, standing: &HashMap<String, u8>) -> Vec<Offer> {
    let mut seen = std::collections::HashSet::new();
    let mut offers: Vec<Offer> = offers
        .into_iter()
        .filter(|o| seen.insert(o.provider.clone()))
        .collect();
    offers.sort_by_key(|o| {
        let rank = standing.get(&o.provider).copied().unwrap_or(50);
        (o.price_sat, std::cmp::Reverse(rank))
    });
    offers
}

#[cfg(test)]
mod tests {
    use fleetmesh_proto::ask::AskBody;
    use fleetmesh_proto::{Engine, Mode, NodeKeys};

    use super::*;

    fn ask(bid: Value) -> Ask {
        let keys = NodeKeys::generate().unwrap();
        let now = fleetmesh_proto::unix_now();
        let e = AskBody {
            d: "a".into(),
            engine: Engine::Wasm,
            mode: Mode::Delivery,
            content: json!({"limits": {"fuel": 1000}, "bid": bid}),
            expires_at: now + 60,
            provider: None,
        }
        .sign(&keys, now)
        .unwrap();
        Ask::from_event(e, now).unwrap()
    }

    fn offer(provider: &str, price_sat: u64) -> Offer {
        Offer {
            provider: provider.into(),
            price_sat,
            terms: None,
            htlc: None,
        }
    }

    #[test]
    fn offers_are_read_against_their_ask_and_ranked_by_price_then_standing() {
        let a = ask(json!({"amount": 5000, "unit": "msat"}));
        let good = offer_message(&a, 4, Some(&"ab".repeat(32)), Some(&"cd".repeat(32)));
        let o = Offer::read("p1", &good, &a).unwrap();
        assert_eq!(
            (o.price_sat, o.terms.as_deref()),
            (4, Some("ab".repeat(32).as_str()))
        );
        // above the bid (5 sat), for another ask, another mode, not an offer
        let dear = offer_message(&a, 6, None, None);
        assert_eq!(Offer::read("p", &dear, &a).unwrap_err().code, "bid-too-low");
        let other = offer_message(&ask(json!({"amount": 5, "unit": "sat"})), 1, None, None);
        assert_eq!(Offer::read("p", &other, &a).unwrap_err().code, "mismatch");
        let mut moded = good.clone();
        moded["mode"] = json!("proof");
        assert_eq!(Offer::read("p", &moded, &a).unwrap_err().code, "mismatch");
        let mut job = good.clone();
        job["type"] = json!("job");
        assert_eq!(Offer::read("p", &job, &a).unwrap_err().code, "schema");
        let mut msat = good;
        msat["price"]["unit"] = json!("msat");
        assert_eq!(Offer::read("p", &msat, &a).unwrap_err().code, "schema");

        let standing = HashMap::from([("b".to_owned(), 90), ("c".to_owned(), 10)]);
        let ranked = rank(
            vec![
                offer("c", 2),
                offer("a", 3),
                offer("b", 2),
                offer("d", 2),
                offer("b", 1),
            ],
            &standing,
        );
        let order: Vec<(&str, u64)> = ranked
            .iter()
            .map(|o| (o.provider.as_str(), o.price_sat))
            .collect();
        // one offer per provider (its first), cheapest first, then the better standing
        // (unknown counts as 50)
        assert_eq!(order, [("b", 2), ("d", 2), ("c", 2), ("a", 3)]);
    }

    #[test]
    fn terms_sell_each_engine_only_under_the_modes_that_verify_it() {
        let limits = JobLimits {
            engines: vec![Engine::Wasm],
            ..JobLimits::default()
        };
        let t = limits.terms();
        assert_eq!(t.engines, [Engine::Wasm]);
        assert!(t.sells(Engine::Wasm, Mode::Delivery));
        assert!(!t.modes.contains(&Mode::Proof), "{:?}", t.modes);
        assert_eq!(t.limits["fuel"], limits.max_fuel);
        assert_eq!(bid_sat(&json!({"amount": 1999, "unit": "msat"})), Some(1));
        assert_eq!(bid_sat(&json!({"amount": 1, "unit": "usd"})), None);
    }
}
