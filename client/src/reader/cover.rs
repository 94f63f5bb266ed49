//! Cover traffic: lookups of random addresses, sent like real ones.

use super::*;

impl PrivateReader {
    /// One lookup of a random address in the newest snapshot, sent exactly
    /// like a real one (cover traffic).
    /// While idle there is none (it would wake the reader, and downloads
    /// would follow), and it never counts as a read.
    pub async fn cover_lookup(&self) {
        let at = self.last_selector.lock().expect("lock").clone();
        self.cover_lookup_at(&at).await;
    }

    /// [`Self::cover_lookup`] at the view `sel` names (a call's padding
    /// rounds: at the view its real rounds read).
    pub async fn cover_lookup_at(&self, sel: &BlockSelector) {
        if self.is_idle() {
            return;
        }
        let key = ReadKey::Account(Address::from(rand::random::<[u8; 20]>()));
        let _ = self.lookup_keys_as(sel, &[key], Waking::No).await;
    }
}

/// Cover lookups at the times of a Poisson process of `per_hour`, until the
/// reader is dropped.
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
