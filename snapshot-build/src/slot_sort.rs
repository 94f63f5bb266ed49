//! Storage slots put in PIR-key order within a memory budget, for a
//! whole-state base too large to hold: a node's storage table is walked
//! by contract, but `records.bin` lists slots by their PIR key (a hash of
//! both), so the slots are sorted in runs that fit the budget, each run
//! spilled to a file, and the runs merged as `records.bin` is written.
//! Mainnet's ~1.1e9 slots are ~130 GB of runs (117 bytes a slot, the
//! format of `records.bin`) and never more than the budget in memory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use alloy_primitives::B256;
use protocol::storage::StorageRecord;

use crate::records::{parse_slot, slot_bytes, SLOT_BYTES};

/// Bytes a held slot costs while a run is sorted.
const HELD_SLOT_BYTES: usize = std::mem::size_of::<StorageRecord>();

/// Collects slots in any order; [`SlotSorter::finish`] hands them back in
/// key order.
pub struct SlotSorter {
    dir: PathBuf,
    run_len: usize,
    held: Vec<StorageRecord>,
    /// Each spilled run and how many slots it holds.
    runs: Vec<(PathBuf, u64)>,
    count: u64,
}

impl SlotSorter {
    /// A sorter holding at most `memory_bytes` of slots at once (at least
    /// one); runs are spilled into `dir` (created when the first run is;
    /// removed with the sorted slots).
    pub fn new(dir: PathBuf, memory_bytes: usize) -> Self {
        SlotSorter {
            dir,
            run_len: (memory_bytes / HELD_SLOT_BYTES).max(1),
            held: Vec::new(),
            runs: Vec::new(),
            count: 0,
        }
    }

    /// Slots pushed so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn push(&mut self, slot: StorageRecord) -> std::io::Result<()> {
        self.held.push(slot);
        self.count += 1;
        if self.held.len() >= self.run_len {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the held slots, sorted, as one more run.
    fn spill(&mut self) -> std::io::Result<()> {
        self.held.sort_unstable_by_key(|s| s.key);
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(format!("run-{}", self.runs.len()));
        let mut w = BufWriter::new(File::create(&path)?);
        let len = self.held.len() as u64;
        for slot in self.held.drain(..) {
            w.write_all(&slot_bytes(&slot))?;
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        self.runs.push((path, len));
        Ok(())
    }

    /// Every slot pushed, in key order: held and sorted when they never
    /// passed the budget, else merged from the runs.
    pub fn finish(mut self) -> std::io::Result<SortedSlots> {
        let count = self.count;
        if self.runs.is_empty() {
            self.held.sort_unstable_by_key(|s| s.key);
            let held = std::mem::take(&mut self.held).into_iter();
            return Ok(SortedSlots {
                count,
                source: Source::Held(held),
                dir: None,
            });
        }
        if !self.held.is_empty() {
            self.spill()?;
        }
        let mut readers = Vec::with_capacity(self.runs.len());
        for (path, _) in &self.runs {
            readers.push(BufReader::with_capacity(1 << 16, File::open(path)?));
        }
        let mut merge = Merge {
            readers,
            left: self.runs.iter().map(|(_, len)| *len).collect(),
            heads: Vec::new(),
            heap: BinaryHeap::new(),
        };
        for run in 0..merge.readers.len() {
            let head = merge.read(run)?;
            merge.heads.push(head);
        }
        Ok(SortedSlots {
            count,
            source: Source::Merged(merge),
            dir: Some(std::mem::take(&mut self.dir)),
        })
    }
}

/// The slots of a [`SlotSorter`] in key order; the runs are removed when
/// it is dropped.
pub struct SortedSlots {
    count: u64,
    source: Source,
    dir: Option<PathBuf>,
}

enum Source {
    Held(std::vec::IntoIter<StorageRecord>),
    Merged(Merge),
}

/// A k-way merge of sorted runs: the smallest head first.
struct Merge {
    readers: Vec<BufReader<File>>,
    /// Slots each run has yet to give: a run that ends sooner is cut
    /// short (an error), not done.
    left: Vec<u64>,
    heads: Vec<Option<StorageRecord>>,
    heap: BinaryHeap<Reverse<(B256, usize)>>,
}

impl Merge {
    /// The next slot of run `run` (none at its end), queued by its key.
    fn read(&mut self, run: usize) -> std::io::Result<Option<StorageRecord>> {
        if self.left[run] == 0 {
            return Ok(None);
        }
        let mut chunk = [0u8; SLOT_BYTES];
        self.readers[run].read_exact(&mut chunk)?;
        self.left[run] -= 1;
        let slot = parse_slot(&chunk);
        self.heap.push(Reverse((slot.key, run)));
        Ok(Some(slot))
    }

    fn next(&mut self) -> std::io::Result<Option<StorageRecord>> {
        let Some(Reverse((_, run))) = self.heap.pop() else {
            return Ok(None);
        };
        let next = self.read(run)?;
        Ok(std::mem::replace(&mut self.heads[run], next))
    }
}

impl SortedSlots {
    /// How many slots there are (all of them, however many were read).
    pub fn total(&self) -> u64 {
        self.count
    }

    /// Hands the slots to `write` as plain records (what
    /// [`crate::records::write_record_stream`] takes). A read error ends
    /// them there and is returned instead of what `write` made of the
    /// short stream.
    pub fn write_with<T>(
        mut self,
        write: impl FnOnce(&mut dyn Iterator<Item = StorageRecord>) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let mut failed = None;
        let mut slots = std::iter::from_fn(|| match self.next()? {
            Ok(slot) => Some(slot),
            Err(e) => {
                failed = Some(e);
                None
            }
        });
        let written = write(&mut slots);
        failed.map_or(written, Err)
    }
}

impl Iterator for SortedSlots {
    type Item = std::io::Result<StorageRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = match &mut self.source {
            Source::Held(held) => held.next().map(Ok),
            Source::Merged(merge) => merge.next().transpose(),
        };
        if matches!(next, Some(Err(_))) {
            // Nothing after an error: the order would no longer hold.
            self.source = Source::Held(Vec::new().into_iter());
        }
        next
    }
}

impl Drop for SortedSlots {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{Address, U256};

    fn slots(n: u64) -> Vec<StorageRecord> {
        (0..n)
            .map(|i| {
                let contract = Address::with_last_byte((i % 7) as u8);
                StorageRecord::new(contract, B256::from(U256::from(i)), U256::from(i + 1))
            })
            .collect()
    }

    fn sorted_by(memory_bytes: usize, dir: &std::path::Path) -> (Vec<StorageRecord>, bool) {
        let mut sorter = SlotSorter::new(dir.join("runs"), memory_bytes);
        for s in slots(1000) {
            sorter.push(s).unwrap();
        }
        let sorted = sorter.finish().unwrap();
        assert_eq!(sorted.total(), 1000);
        let spilled = dir.join("runs").exists();
        (sorted.map(Result::unwrap).collect(), spilled)
    }

    #[test]
    fn spilled_runs_merge_into_the_order_a_held_sort_gives() {
        let dir = tempfile::tempdir().unwrap();
        let mut want = slots(1000);
        want.sort_unstable_by_key(|s| s.key);
        let (held, spilled) = sorted_by(1 << 30, dir.path());
        assert!(!spilled);
        assert_eq!(held, want);
        // 1 slot, 33 and 1000 a run: every run boundary case.
        for per_run in [1, 33, 999] {
            let (merged, spilled) = sorted_by(per_run * HELD_SLOT_BYTES, dir.path());
            assert!(spilled, "{per_run} a run");
            assert_eq!(merged.len(), 1000);
            assert_eq!(merged, want, "{per_run} a run");
            assert!(!dir.path().join("runs").exists(), "runs removed once read");
        }
    }

    /// 100 slots in runs of 10 spilled under `dir`/`name`, the fourth
    /// run cut short, then sorted.
    fn with_a_run_cut_short(dir: &std::path::Path, name: &str) -> SortedSlots {
        let mut sorter = SlotSorter::new(dir.join(name), 10 * HELD_SLOT_BYTES);
        for s in slots(100) {
            sorter.push(s).unwrap();
        }
        let run = dir.join(name).join("run-3");
        let bytes = std::fs::read(&run).unwrap();
        std::fs::write(&run, &bytes[..bytes.len() - 5]).unwrap();
        sorter.finish().unwrap()
    }

    #[test]
    fn a_run_cut_short_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let sorted = with_a_run_cut_short(dir.path(), "runs");
        assert_eq!(sorted.total(), 100);
        let read: Vec<_> = sorted.collect();
        assert!(
            read.last().unwrap().is_err(),
            "the short run ends in an error"
        );
        assert!(read.iter().filter(|r| r.is_ok()).count() < 100);
        // Handed on as plain records: the error, not the short count.
        let sorted = with_a_run_cut_short(dir.path(), "again");
        let written = sorted.write_with(|s| Ok(s.count()));
        assert_eq!(
            written.unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
    }
}
