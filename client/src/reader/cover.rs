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

    /// One round of stand-ins at the view `sel` names, sent like a real
    /// round with `queries` queries per PIR level (a count of the ladder:
    /// the rung a real round had), and waited for. Each stand-in is a key
    /// of the view's hot tier waiting for an audit (the newest first: a
    /// call's padding audits what it read of the tier before its answer
    /// is released), else a random key. False where it failed (sent or
    /// not): the audits it was to carry wait.
    pub async fn pad_round(&self, sel: &BlockSelector, queries: usize) -> bool {
        if self.is_idle() {
            return false;
        }
        match self.select_as(sel, Waking::No).await {
            Ok(view) => self.pad_round_in(&view, queries).await,
            Err(_) => false,
        }
    }

    /// [`Self::pad_round`] in `view` (a request's own: its tier's keys
    /// are the ones audited).
    pub async fn pad_round_in(&self, view: &ViewClient, queries: usize) -> bool {
        if self.distrusted().is_some() {
            return false;
        }
        let stand_ins = queries.saturating_sub(self.canaries_per_request).max(1);
        match self.stand_in_round(view, stand_ins).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "a padding round failed");
                false
            }
        }
    }

    /// Notes a private request's rounds, each by its query count: cover
    /// requests replay such schedules.
    pub fn note_schedule(&self, rungs: Vec<usize>) {
        if !rungs.is_empty() {
            let mut kept = self.schedules.lock().expect("lock");
            push_bounded(&mut kept, rungs, SCHEDULES_KEPT);
        }
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

    /// Notes how long a request of `rung` queries per level took (made,
    /// sent, answered and checked).
    pub(super) fn timed_request(&self, rung: usize, took: std::time::Duration) {
        let mut times = self.request_times.lock().expect("lock");
        push_bounded(&mut times, (rung, took), TIMES_KEPT);
    }

    /// How long a round answered from kept answers waits, where a first
    /// read would have sent `rung` queries per level: one of the recent
    /// requests' whole times of that count at random (of any count while there
    /// is none), at least their tenth percentile (so that kept answers are
    /// not the fastest), at most [`MOST_KEPT_WAIT`]; [`UNTIMED_ROUND`]
    /// before any request was timed.
    pub fn fresh_like_delay(&self, rung: usize) -> std::time::Duration {
        let times = self.request_times.lock().expect("lock");
        let of_rung: Vec<std::time::Duration> = times
            .iter()
            .filter(|(r, _)| *r == rung)
            .map(|(_, t)| *t)
            .collect();
        let mut pool: Vec<std::time::Duration> = match of_rung.is_empty() {
            true => times.iter().map(|(_, t)| *t).collect(),
            false => of_rung,
        };
        if pool.is_empty() {
            return UNTIMED_ROUND;
        }
        let drawn = pool[rand::random_range(0..pool.len())];
        pool.sort_unstable();
        drawn.max(pool[pool.len() / 10]).min(MOST_KEPT_WAIT)
    }

    /// The query count per level of a round that finds one new key (the
    /// ladder's least, with the canaries): what padding rounds send.
    pub fn least_rung(&self) -> usize {
        self.first_read_rung(1)
    }

    /// Waits as a round of the least count would take (a padding round of
    /// a request that sent nothing: its time, without its bytes), when
    /// kept answers are to wait.
    pub async fn wait_as_a_round(&self) {
        if self.kept_delay {
            tokio::time::sleep(self.fresh_like_delay(self.least_rung())).await;
        }
    }
}

/// Appends `item` to `kept`, dropping the oldest past `most`.
fn push_bounded<T>(kept: &mut std::collections::VecDeque<T>, item: T, most: usize) {
    if kept.len() == most {
        kept.pop_front();
    }
    kept.push_back(item);
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

tokio::task_local! {
    /// What the reads of one private request sent, where it counts them.
    static SENT: std::cell::RefCell<Sent>;
}

/// The rounds a private request's reads sent and each round's query count
/// per PIR level (that of its request to every level): its own, whatever
/// else (cover traffic, other calls, other entries of a batch) runs
/// meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub rounds: usize,
    pub rungs: Vec<usize>,
    /// The keys whose value the hot tier gave (unaudited, or found
    /// forged with no value of the levels' to take instead).
    pub from_tier: Vec<ReadKey>,
}

/// Runs `f`, and gives what its reads sent with its output.
pub async fn counting_requests<F: std::future::Future>(f: F) -> (F::Output, Sent) {
    SENT.scope(Default::default(), async {
        let out = f.await;
        (out, SENT.with(|sent| sent.take()))
    })
    .await
}

/// Notes a key whose value the hot tier gave the current request (not a
/// wide word's high part: never audited, its low part's key is noted).
pub(super) fn count_from_tier(key: ReadKey) {
    if matches!(key, ReadKey::HighPart { .. }) {
        return;
    }
    let _ = SENT.try_with(|sent| sent.borrow_mut().from_tier.push(key));
}

/// Notes a round of the current request (where one is counted).
pub(super) fn count_round() {
    let _ = SENT.try_with(|sent| sent.borrow_mut().rounds += 1);
}

/// Notes a request's query count per level (the round's main request
/// notes last, and so gives the round's count).
pub(super) fn count_rung(rung: usize) {
    let _ = SENT.try_with(|sent| {
        let mut sent = sent.borrow_mut();
        if sent.rungs.len() < sent.rounds {
            sent.rungs.push(rung);
        } else if let Some(last) = sent.rungs.last_mut() {
            *last = rung;
        }
    });
}
