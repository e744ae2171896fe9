//! Handing freed heap memory back to the system.
//!
//! glibc's allocator keeps what a process frees in its arenas and returns only the free top of
//! each heap. After a burst — a thousand Profiles converging at once, hundreds of requests with
//! their connections and buffers — the heap is mostly free pages between a few live blocks, and
//! the process would go on holding its peak. `malloc_trim(0)` gives back every free page of every
//! arena (`madvise(MADV_DONTNEED)`); the memory is the system's again, not only uncounted.

use std::time::Duration;

/// How often [`release_freed_periodically`] trims: a burst's memory is back within this long.
pub const RELEASE_PERIOD: Duration = Duration::from_secs(20);

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" {
    fn malloc_trim(pad: usize) -> std::ffi::c_int;
}

/// Returns the allocator's free pages to the system; whether any were returned.
pub fn release_freed() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks the allocator's own free lists, under its own locks.
        unsafe { malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Calls [`release_freed`] every [`RELEASE_PERIOD`] until the process ends. A trim of a heap of
/// tens of MiB takes well under a millisecond.
pub async fn release_freed_periodically() {
    let mut every = tokio::time::interval(RELEASE_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        release_freed();
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn resident_anonymous_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn freed_memory_between_live_blocks_goes_back_to_the_system() {
        const BLOCK: usize = 4096;
        const BLOCKS: usize = 16 * 1024; // 64 MiB
        // Every 64th block stays: the freed ones lie between live blocks, never at a heap's top,
        // where free() would return them by itself.
        let mut blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8; BLOCK]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter_mut().step_by(64).map(std::mem::take).collect();
        drop(blocks);
        let before = resident_anonymous_kib();
        assert!(release_freed(), "nothing was returned");
        let after = resident_anonymous_kib();
        // About 63 MiB are free; at least half of it must leave the process.
        assert!(before.saturating_sub(after) > 32 * 1024, "resident anonymous memory went from {before} KiB to {after} KiB");
        assert_eq!(kept.len(), BLOCKS / 64);
        assert!(kept.iter().all(|b| b.len() == BLOCK));
    }
}
