//! The ids a node's concurrent sync rounds are fetching, shared by them
//! ([`super::SyncOptions::in_flight`]): rounds with several peers at once fetch each
//! missing event from one of them.

use negentropy::Id;

/// Ids some round of a node is fetching now (see [`super::SyncOptions::in_flight`]).
#[derive(Debug, Default)]
pub struct InFlight(std::sync::Mutex<std::collections::HashSet<[u8; 32]>>);

impl InFlight {
    /// Takes the ids of `need` no other round holds; the rest are left out.
    pub(super) fn claim(self: &std::sync::Arc<Self>, need: Vec<Id>) -> (Claimed, usize) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let before = need.len();
        let ids: Vec<Id> = need
            .into_iter()
            .filter(|id| held.insert(id.to_bytes()))
            .collect();
        let skipped = before - ids.len();
        (
            Claimed {
                ids,
                of: self.clone(),
            },
            skipped,
        )
    }

    /// How many ids are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Ids claimed by one round, given back when it ends (fetched or not).
pub(super) struct Claimed {
    pub(super) ids: Vec<Id>,
    of: std::sync::Arc<InFlight>,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        let mut held = self.of.0.lock().unwrap_or_else(|p| p.into_inner());
        for id in &self.ids {
            held.remove(&id.to_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_in_flight_is_fetched_by_one_round_and_free_again_when_that_round_ends() {
        let f = std::sync::Arc::new(InFlight::default());
        let id = |b: u8| Id::from_byte_array([b; 32]);
        let (first, skipped) = f.claim(vec![id(1), id(2)]);
        assert_eq!((first.ids.len(), skipped), (2, 0));
        // a concurrent round wants 2 and 3: 2 is left to the first
        let (second, skipped) = f.claim(vec![id(2), id(3)]);
        assert_eq!((second.ids.clone(), skipped), (vec![id(3)], 1));
        assert_eq!(f.len(), 3);
        drop(first);
        // the first round ended: 2 may be fetched again (it failed, say)
        let (third, skipped) = f.claim(vec![id(2), id(3)]);
        assert_eq!((third.ids.clone(), skipped), (vec![id(2)], 1));
        drop(third);
        assert_eq!(f.len(), 1, "3 is still the second round's");
    }
}
