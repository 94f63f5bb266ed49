//! Cover traffic and padding rounds: requests of random keys, sent like
//! real ones, with the rounds and query counts real requests had; and the
//! times kept answers wait, drawn from real requests' times.

use super::*;

impl PrivateReader {
    /// One cover request in the view the wallet's last read named: the
    /// rounds of a recent private request, each with its query count, of
    /// random keys (one round of the ladder's least count before any
    /// private request was made). While idle there is none (it would wake
    /// the reader, and downloads would follow), and it never counts as a
    /// read.
    pub async fn cover_lookup(&self) {
        let at = self.last_selector.lock().expect("lock").clone();
        for rung in self.recent_schedule() {
            self.pad_round(&at, rung).await;
        }
    }

    /// One round of random keys at the view `sel` names, sent like a real
    /// one with `queries` queries per PIR level (a count of the ladder:
    /// the rung a real round had), and waited for.
    pub async fn pad_round(&self, sel: &BlockSelector, queries: usize) {
        if self.is_idle() {
            return;
        }
        let random = queries.saturating_sub(self.canaries_per_request).max(1);
        let keys: Vec<ReadKey> = (0..random)
            .map(|_| ReadKey::Account(Address::from(rand::random::<[u8; 20]>())))
            .collect();
        let _ = self.lookup_keys_as(sel, &keys, Waking::No).await;
    }

    /// The queries per PIR level of the last request sent (0: none yet).
    pub fn last_rung(&self) -> usize {
        self.last_rung.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes a private request's rounds, each by its query count: cover
    /// requests replay such schedules.
    pub fn note_schedule(&self, rungs: Vec<usize>) {
        if rungs.is_empty() {
            return;
        }
        let mut kept = self.schedules.lock().expect("lock");
        if kept.len() == SCHEDULES_KEPT {
            kept.pop_front();
        }
        kept.push_back(rungs);
    }

    /// A recent private request's schedule, at random (one round of the
    /// ladder's least count while there is none).
    fn recent_schedule(&self) -> Vec<usize> {
        let kept = self.schedules.lock().expect("lock");
        match kept.len() {
            0 => vec![self.ladder.max(1)],
            n => kept[rand::random_range(0..n)].clone(),
        }
    }

    /// Notes how long a request took.
    pub(super) fn timed_request(&self, took: std::time::Duration) {
        let mut times = self.request_times.lock().expect("lock");
        if times.len() == TIMES_KEPT {
            times.pop_front();
        }
        times.push_back(took);
    }

    /// How long a round answered from kept answers waits: one of the recent
    /// requests' times at random, at least their tenth percentile (so that
    /// kept answers are not the fastest); [`UNTIMED_ROUND`] before any.
    pub fn fresh_like_delay(&self) -> std::time::Duration {
        let times = self.request_times.lock().expect("lock");
        if times.is_empty() {
            return UNTIMED_ROUND;
        }
        let mut sorted: Vec<std::time::Duration> = times.iter().copied().collect();
        sorted.sort_unstable();
        let tenth = sorted[sorted.len() / 10];
        times[rand::random_range(0..times.len())].max(tenth)
    }
}

/// Cover requests at the times of a Poisson process of `per_hour`, until
/// the reader is dropped.
pub(super) async fn cover_traffic(reader: Weak<PrivateReader>, per_hour: f64) {
    let mean_s = 3600.0 / per_hour;
    loop {
        // Exponential gaps: the times carry no pattern of their own.
        let u: f64 = rand::random::<f64>().max(f64::MIN_POSITIVE);
        let gap = (-u.ln() * mean_s).min(86_400.0);
        tokio::time::sleep(std::time::Duration::from_secs_f64(gap)).await;
        let Some(reader) = reader.upgrade() else {
            return;
        };
        reader.cover_lookup().await;
    }
}
