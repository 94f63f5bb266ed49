//! Answers kept per immutable level: what a PIR level answered for a key
//! is what it will always answer (a level is named by its setup's digest,
//! and its records never change), so a key read once at a level is never
//! queried there again while that level serves. A wallet's refresh of
//! keys it already read then costs no PIR query at all: the small deltas
//! above the base are read locally anyway.
//!
//! Kept in memory and on disk (`<setup digest>.answers` in the cache
//! folder, file mode 0600: which keys a user read is theirs alone), so a
//! restart remembers them. The file is append-only, one record per
//! answer: a crash mid-append leaves a truncated last record, which the
//! next load ignores.
//!
//! What the server can infer from queries that no longer repeat, and how
//! padding still shapes the traffic: docs/security.md, "Answers kept".

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use alloy_primitives::B256;
use protocol::Sha3Digest;

use crate::levels::Found;

/// Answers kept per level, at most: past it, new answers are not kept
/// (a bound on memory and on the file a load reads).
pub const MAX_ANSWERS_PER_LEVEL: usize = 1 << 20;

/// Largest value kept (the widest record of a level is far below it;
/// 255 is the length byte's "absent" marker).
const MAX_VALUE_BYTES: usize = 254;
/// The length byte of an absent answer.
const ABSENT: u8 = 0xff;

/// The answers of one level.
#[derive(Default)]
struct LevelAnswers {
    by_key: HashMap<B256, Found>,
    loaded: bool,
}

/// Answers kept per level (by its setup's digest), on disk under `dir`.
pub struct AnswerCache {
    dir: PathBuf,
    levels: Mutex<HashMap<Sha3Digest, LevelAnswers>>,
}

impl AnswerCache {
    pub fn new(dir: PathBuf) -> Self {
        AnswerCache {
            dir,
            levels: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, level: &Sha3Digest) -> PathBuf {
        self.dir.join(format!("{level}.answers"))
    }

    /// `f` of `level`'s answers, its file read on first use.
    fn with_level<T>(&self, level: &Sha3Digest, f: impl FnOnce(&mut LevelAnswers) -> T) -> T {
        let mut levels = self.levels.lock().expect("answers lock");
        let answers = levels.entry(level.clone()).or_default();
        if !answers.loaded {
            answers.by_key = load(&self.path(level));
            answers.loaded = true;
        }
        f(answers)
    }

    /// What `level` answered for each of `keys` when asked before (`None`:
    /// not asked yet).
    pub fn known(&self, level: &Sha3Digest, keys: &[B256]) -> Vec<Option<Found>> {
        self.with_level(level, |a| {
            keys.iter().map(|k| a.by_key.get(k).cloned()).collect()
        })
    }

    /// Up to `most` keys `level` answered with a value, and the values.
    pub fn some_present(&self, level: &Sha3Digest, most: usize) -> Vec<(B256, Found)> {
        self.with_level(level, |a| {
            a.by_key
                .iter()
                .filter(|(_, v)| v.is_some())
                .take(most)
                .map(|(k, v)| (*k, v.clone()))
                .collect()
        })
    }

    /// Keeps what `level` answered (verified) for `keys`, in memory and
    /// appended to its file (a failure to write is only logged: the
    /// answers are still kept for this run).
    pub fn keep(&self, level: &Sha3Digest, keys: &[B256], found: &[Found]) {
        let record = self.with_level(level, |answers| {
            let mut record = Vec::new();
            for (key, value) in keys.iter().zip(found) {
                if answers.by_key.len() >= MAX_ANSWERS_PER_LEVEL
                    || answers.by_key.contains_key(key)
                    || value.as_ref().is_some_and(|v| v.len() > MAX_VALUE_BYTES)
                {
                    continue;
                }
                answers.by_key.insert(*key, value.clone());
                encode(&mut record, key, value);
            }
            record
        });
        if record.is_empty() {
            return;
        }
        if let Err(e) = append_private(&self.dir, &self.path(level), &record) {
            tracing::warn!(error = %e, "cannot keep answers on disk");
        }
    }
}

impl AnswerCache {
    /// Drops the answers of every level `listed` says is gone (retired,
    /// merged, reorged away), in memory and on disk: what a wallet read
    /// is kept no longer than the level it was read from.
    pub fn retain(&self, listed: impl Fn(&Sha3Digest) -> bool) {
        self.levels
            .lock()
            .expect("answers lock")
            .retain(|level, _| listed(level));
        let Ok(files) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for file in files.flatten() {
            let name = file.file_name();
            let Some(level) = name.to_str().and_then(|n| n.strip_suffix(".answers")) else {
                continue;
            };
            match level.parse::<Sha3Digest>() {
                Ok(level) if !listed(&level) => {
                    if let Err(e) = std::fs::remove_file(file.path()) {
                        tracing::warn!(error = %e, "cannot drop the kept answers of a level gone");
                    }
                }
                _ => {}
            }
        }
    }

    /// Drops every answer kept of `level`, in memory and on disk (its
    /// answers may come from a request a tamper let through).
    pub fn forget(&self, level: &Sha3Digest) {
        let mut levels = self.levels.lock().expect("answers lock");
        levels.insert(
            level.clone(),
            LevelAnswers {
                by_key: HashMap::new(),
                loaded: true,
            },
        );
        let path = self.path(level);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(file = %path.display(), "kept answers of a suspect level dropped")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, file = %path.display(), "cannot drop kept answers")
            }
        }
    }
}

/// One record: the key, a length byte (0xff: absent; else the value's
/// length), the value.
fn encode(out: &mut Vec<u8>, key: &B256, value: &Found) {
    out.extend_from_slice(key.as_slice());
    match value {
        None => out.push(ABSENT),
        Some(v) => {
            out.push(v.len() as u8);
            out.extend_from_slice(v);
        }
    }
}

/// The records of a file; a truncated last record (a crash mid-append)
/// and anything past [`MAX_ANSWERS_PER_LEVEL`] are dropped.
fn decode(bytes: &[u8]) -> HashMap<B256, Found> {
    let mut out = HashMap::new();
    let mut rest = bytes;
    while rest.len() >= 33 && out.len() < MAX_ANSWERS_PER_LEVEL {
        let key = B256::from_slice(&rest[..32]);
        let len = rest[32];
        rest = &rest[33..];
        let value = match len {
            ABSENT => None,
            n if rest.len() >= n as usize => {
                let (v, tail) = rest.split_at(n as usize);
                rest = tail;
                Some(v.to_vec())
            }
            _ => break,
        };
        out.insert(key, value);
    }
    out
}

/// Largest answers file read: every record at its widest.
const MAX_FILE_BYTES: u64 = (MAX_ANSWERS_PER_LEVEL * (33 + MAX_VALUE_BYTES)) as u64;

fn load(path: &Path) -> HashMap<B256, Found> {
    let too_big = std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_FILE_BYTES);
    if too_big {
        tracing::warn!(file = %path.display(), "answers file too large; ignored");
        return HashMap::new();
    }
    std::fs::read(path).map(|b| decode(&b)).unwrap_or_default()
}

/// Appends `bytes` to `path`, creating it readable by its owner only.
fn append_private(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_survive_a_restart_and_a_torn_append() {
        let dir = tempfile::tempdir().unwrap();
        let level = Sha3Digest::of(b"level");
        let other = Sha3Digest::of(b"other");
        let keys = [
            B256::repeat_byte(1),
            B256::repeat_byte(2),
            B256::repeat_byte(3),
        ];
        let cache = AnswerCache::new(dir.path().to_path_buf());
        assert_eq!(cache.known(&level, &keys), vec![None, None, None]);
        cache.keep(&level, &keys[..2], &[Some(vec![7; 24]), None]);
        let want = vec![Some(Some(vec![7; 24])), Some(None), None];
        assert_eq!(cache.known(&level, &keys), want);
        assert_eq!(cache.known(&other, &keys), vec![None, None, None]);

        // A new cache on the same folder (a restart) finds them.
        let again = AnswerCache::new(dir.path().to_path_buf());
        assert_eq!(again.known(&level, &keys), want);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(again.path(&level)).unwrap().permissions();
            assert_eq!(mode.mode() & 0o777, 0o600);
        }

        // A torn last record is dropped, the others kept.
        let path = again.path(&level);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[9; 32]);
        bytes.push(24);
        bytes.extend_from_slice(&[1; 5]);
        std::fs::write(&path, bytes).unwrap();
        let torn = AnswerCache::new(dir.path().to_path_buf());
        assert_eq!(torn.known(&level, &keys), want);
        assert_eq!(torn.known(&level, &[B256::repeat_byte(9)]), vec![None]);

        // Forgotten: in memory and on disk.
        torn.forget(&level);
        assert_eq!(torn.known(&level, &keys), vec![None, None, None]);
        assert!(!path.exists());
        let after = AnswerCache::new(dir.path().to_path_buf());
        assert_eq!(after.known(&level, &keys), vec![None, None, None]);
    }

    /// A value as long as the "absent" marker is not kept (it would read
    /// back as absent); one byte shorter is.
    #[test]
    fn answers_go_with_their_level() {
        let dir = tempfile::tempdir().unwrap();
        let (gone, kept) = (Sha3Digest::of(b"gone"), Sha3Digest::of(b"kept"));
        let key = [B256::repeat_byte(1)];
        let cache = AnswerCache::new(dir.path().to_path_buf());
        cache.keep(&gone, &key, &[Some(vec![1; 24])]);
        cache.keep(&kept, &key, &[Some(vec![2; 24])]);
        std::fs::write(dir.path().join("setup.bin"), b"not answers").unwrap();
        cache.retain(|level| *level == kept);
        assert!(!cache.path(&gone).exists(), "on disk too");
        assert!(cache.path(&kept).exists());
        assert!(
            dir.path().join("setup.bin").exists(),
            "other files left alone"
        );
        assert_eq!(cache.known(&gone, &key), vec![None]);
        let again = AnswerCache::new(dir.path().to_path_buf());
        assert_eq!(again.known(&kept, &key), vec![Some(Some(vec![2; 24]))]);
    }

    #[test]
    fn no_value_is_kept_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let level = Sha3Digest::of(b"level");
        let keys = [B256::repeat_byte(1), B256::repeat_byte(2)];
        let cache = AnswerCache::new(dir.path().to_path_buf());
        cache.keep(&level, &keys, &[Some(vec![1; 255]), Some(vec![2; 254])]);
        let again = AnswerCache::new(dir.path().to_path_buf());
        assert_eq!(
            again.known(&level, &keys),
            vec![None, Some(Some(vec![2; 254]))]
        );
    }
}
