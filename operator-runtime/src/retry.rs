//! Retry delays: exponential with jitter, per object, from the `backoff` crate. Controllers ask
//! [`Backoffs::next`] in their error policy and [`Backoffs::reset`] after a successful reconcile,
//! so one failing object backs off on its own while the others keep their pace; loops that wait for
//! NATS use [`exponential`] directly.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use backoff::ExponentialBackoff;
use backoff::backoff::Backoff;

/// First retry after about this long (±50 %).
pub const INITIAL: Duration = Duration::from_millis(500);
/// Retries never wait longer than this (±50 %).
pub const MAX: Duration = Duration::from_secs(300);

/// An exponential backoff starting at `initial`, doubling, capped at `max`, ±50 % jitter, never
/// giving up.
pub fn exponential(initial: Duration, max: Duration) -> ExponentialBackoff {
    backoff::ExponentialBackoffBuilder::new()
        .with_initial_interval(initial)
        .with_multiplier(2.0)
        .with_randomization_factor(0.5)
        .with_max_interval(max)
        .with_max_elapsed_time(None)
        .build()
}

/// One backoff per key (e.g. per object a controller reconciles).
pub struct Backoffs<K> {
    initial: Duration,
    max: Duration,
    state: Mutex<HashMap<K, ExponentialBackoff>>,
}

impl<K: Hash + Eq + Clone> Default for Backoffs<K> {
    fn default() -> Self {
        Self::new(INITIAL, MAX)
    }
}

impl<K: Hash + Eq + Clone> Backoffs<K> {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, state: Mutex::new(HashMap::new()) }
    }

    /// How long to wait before retrying `key` after one more failure.
    pub fn next(&self, key: &K) -> Duration {
        let mut state = self.state.lock().expect("backoff state");
        let backoff = state.entry(key.clone()).or_insert_with(|| exponential(self.initial, self.max));
        backoff.next_backoff().unwrap_or(self.max)
    }

    /// `key` succeeded: its next failure starts again at the initial delay.
    pub fn reset(&self, key: &K) {
        self.state.lock().expect("backoff state").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_per_key_within_the_jitter_and_reset_starts_over() {
        let b: Backoffs<&str> = Backoffs::new(Duration::from_millis(100), Duration::from_secs(1));
        let first = b.next(&"a");
        assert!((50..=150).contains(&first.as_millis()), "{first:?}");
        let second = b.next(&"a");
        assert!((100..=300).contains(&second.as_millis()), "{second:?}");
        // Another key is not slowed down by the first one's failures.
        assert!(b.next(&"b") <= Duration::from_millis(150));
        for _ in 0..10 {
            assert!(b.next(&"a") <= Duration::from_millis(1500), "capped at max + jitter");
        }
        b.reset(&"a");
        assert!(b.next(&"a") <= Duration::from_millis(150));
    }
}
