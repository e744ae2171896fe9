//! Per-caller rate limits of the KFAM API: a token bucket per key (the peer address before the
//! bearer token is reviewed, the reviewed username after), so one caller's flood neither starves
//! the others nor turns into a flood of TokenReviews against the API server. The table is
//! bounded: full buckets (a caller that has been quiet) are dropped first, then the longest idle.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket per key: `burst` requests at once, refilled at `per_second`.
pub struct RateLimit {
    per_second: f64,
    burst: f64,
    max_keys: usize,
    buckets: Mutex<BTreeMap<String, Bucket>>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    pub const fn new(per_second: f64, burst: f64, max_keys: usize) -> Self {
        Self { per_second, burst, max_keys, buckets: Mutex::new(BTreeMap::new()) }
    }

    /// Takes one request of `key`'s at `now`: `Err(wait)` when its bucket is empty, `wait` being
    /// when the next one is allowed.
    pub fn take(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !buckets.contains_key(key) && buckets.len() >= self.max_keys {
            self.make_room(&mut buckets, now);
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket { tokens: self.burst, at: now });
        bucket.tokens = self.refilled(bucket, now);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.per_second))
        }
    }

    fn refilled(&self, bucket: &Bucket, now: Instant) -> f64 {
        (bucket.tokens + now.saturating_duration_since(bucket.at).as_secs_f64() * self.per_second).min(self.burst)
    }

    /// Drops every full bucket (the same as none), or else the one idle longest.
    fn make_room(&self, buckets: &mut BTreeMap<String, Bucket>, now: Instant) {
        buckets.retain(|_, b| self.refilled(b, now) < self.burst);
        if buckets.len() >= self.max_keys
            && let Some(idle) = buckets.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| k.clone())
        {
            buckets.remove(&idle);
        }
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.buckets.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_gets_its_burst_then_waits_for_the_refill_while_others_go_on() {
        let limit = RateLimit::new(2.0, 3.0, 100);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limit.take("alice", t0), Ok(()));
        }
        let wait = limit.take("alice", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500), "one token at 2 per second");
        assert_eq!(limit.take("bob", t0), Ok(()), "another caller is not held back");
        assert!(limit.take("alice", t0 + Duration::from_millis(499)).is_err(), "not refilled yet");
        assert_eq!(limit.take("alice", t0 + Duration::from_millis(1000)), Ok(()));
        // Quiet for long: the bucket is full again, not more than full.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(limit.take("alice", later), Ok(()));
        }
        assert!(limit.take("alice", later).is_err());
    }

    #[test]
    fn the_table_is_bounded_and_drops_quiet_callers_first() {
        let limit = RateLimit::new(1.0, 2.0, 3);
        let t0 = Instant::now();
        limit.take("busy", t0).unwrap();
        limit.take("busy", t0).unwrap();
        limit.take("quiet-1", t0).unwrap();
        limit.take("quiet-2", t0).unwrap();
        assert_eq!(limit.keys(), 3);
        // A second later the quiet ones are full again and make room; the busy one keeps its state.
        let t1 = t0 + Duration::from_secs(1);
        limit.take("new", t1).unwrap();
        assert_eq!(limit.keys(), 2, "busy and new");
        assert_eq!(limit.take("busy", t1), Ok(()), "refilled by one");
        assert!(limit.take("busy", t1).is_err(), "its state was kept, not reset to a full bucket");
        // None quiet: the longest idle goes.
        for key in ["a", "b", "c", "d"] {
            limit.take(key, t1).unwrap();
            limit.take(key, t1).unwrap();
        }
        assert_eq!(limit.keys(), 3);
    }
}
