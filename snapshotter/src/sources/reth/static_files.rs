//! reth's static files (NippyJar), the parts this reader parses: a data
//! file `static_file_<segment>_<first>_<last>`, its offsets (`.off`: one
//! byte giving the offset width, then little-endian offsets; value `i`
//! spans `[off[i], off[i+1])`) and, for change sets, the per-block row
//! index (`.csoff`: per block from `<first>`, the first row and the number
//! of rows, both u64 little-endian). Change-set values are not compressed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::RethError;

/// A segment of static files this reader parses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Segment {
    /// Headers: three LZ4-compressed columns per block.
    Headers,
    /// v2 account change sets: address, then the account before the block.
    AccountChangeSets,
    /// v2 storage change sets: address, slot, then the word before the
    /// block (reth's `StorageBeforeTx`).
    StorageChangeSets,
}

impl Segment {
    /// The segment's name in its files' names.
    fn file_name(self) -> &'static str {
        match self {
            Segment::Headers => "headers",
            Segment::AccountChangeSets => "account-change-sets",
            Segment::StorageChangeSets => "storage-change-sets",
        }
    }

    /// What errors name as the table read.
    pub(super) fn table(self) -> &'static str {
        match self {
            Segment::Headers => "static_files/headers",
            Segment::AccountChangeSets => "static_files/account-change-sets",
            Segment::StorageChangeSets => "static_files/storage-change-sets",
        }
    }

    fn malformed(self, path: &Path, reason: impl std::fmt::Display) -> RethError {
        RethError::Malformed {
            table: self.table(),
            reason: format!("{}: {reason}", path.display()),
        }
    }
}

/// One data file of a segment with its offsets, read where needed
/// (positioned reads: a mainnet file holds gigabytes of change sets, and
/// its offsets file gigabytes of offsets).
pub(super) struct SegmentFile {
    pub first_block: u64,
    pub path: PathBuf,
    segment: Segment,
    data: File,
    data_len: u64,
    offsets: File,
    offsets_path: PathBuf,
    width: u64,
    /// How many offsets the offsets file holds.
    count: u64,
}

/// At most this many values are read at once.
const VALUES_PER_READ: u64 = 1 << 16;

impl SegmentFile {
    fn open(segment: Segment, first_block: u64, path: PathBuf) -> Result<Self, RethError> {
        let data = File::open(&path).map_err(|e| segment.malformed(&path, e))?;
        let data_len = data
            .metadata()
            .map_err(|e| segment.malformed(&path, e))?
            .len();
        let offsets_path = PathBuf::from(format!("{}.off", path.display()));
        let offsets = File::open(&offsets_path).map_err(|e| segment.malformed(&offsets_path, e))?;
        let offsets_len = offsets
            .metadata()
            .map_err(|e| segment.malformed(&offsets_path, e))?
            .len();
        let mut width = [0u8; 1];
        offsets
            .read_exact_at(&mut width, 0)
            .map_err(|e| segment.malformed(&offsets_path, e))?;
        let width = u64::from(width[0]);
        if !(1..=8).contains(&width) || (offsets_len - 1) % width != 0 {
            return Err(segment.malformed(&offsets_path, format_args!("offset width {width}")));
        }
        Ok(SegmentFile {
            first_block,
            count: (offsets_len - 1) / width,
            path,
            segment,
            data,
            data_len,
            offsets,
            offsets_path,
            width,
        })
    }

    /// How many values the offsets delimit.
    pub fn values(&self) -> u64 {
        self.count.saturating_sub(1)
    }

    /// Hands values `first..first + n` to `f` as `(index, bytes)`.
    pub fn for_each_value(
        &self,
        first: u64,
        n: u64,
        mut f: impl FnMut(u64, &[u8]) -> Result<(), RethError>,
    ) -> Result<(), RethError> {
        let end = first
            .checked_add(n)
            .filter(|&e| e <= self.values())
            .ok_or_else(|| {
                self.segment.malformed(
                    &self.offsets_path,
                    format_args!("values {first}+{n} beyond its {}", self.values()),
                )
            })?;
        let mut at = first;
        while at < end {
            let chunk = (end - at).min(VALUES_PER_READ);
            let offsets = self.read_offsets(at, chunk + 1)?;
            let (lo, hi) = (offsets[0], offsets[offsets.len() - 1]);
            if offsets.windows(2).any(|w| w[0] > w[1]) || hi > self.data_len {
                return Err(self.segment.malformed(
                    &self.offsets_path,
                    format_args!(
                        "offsets of values {at}..{} out of order or range",
                        at + chunk
                    ),
                ));
            }
            let mut data = vec![0u8; (hi - lo) as usize];
            self.data
                .read_exact_at(&mut data, lo)
                .map_err(|e| self.segment.malformed(&self.path, e))?;
            for (i, w) in offsets.windows(2).enumerate() {
                f(
                    at + i as u64,
                    &data[(w[0] - lo) as usize..(w[1] - lo) as usize],
                )?;
            }
            at += chunk;
        }
        Ok(())
    }

    /// Offsets `first..first + n` (little-endian, `width` bytes each).
    fn read_offsets(&self, first: u64, n: u64) -> Result<Vec<u64>, RethError> {
        let width = self.width as usize;
        let mut bytes = vec![0u8; n as usize * width];
        self.offsets
            .read_exact_at(&mut bytes, 1 + first * self.width)
            .map_err(|e| self.segment.malformed(&self.offsets_path, e))?;
        Ok(bytes
            .chunks(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect())
    }
}

/// The data files of `segment` under `<datadir>/static_files`, by first
/// block (none when the datadir has no static files).
pub(super) fn segment_files(
    datadir: &Path,
    segment: Segment,
) -> Result<Vec<SegmentFile>, RethError> {
    let prefix = format!("static_file_{}_", segment.file_name());
    let Ok(entries) = std::fs::read_dir(datadir.join("static_files")) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(range) = name.strip_prefix(&prefix) else {
            continue;
        };
        if range.contains('.') {
            continue;
        }
        if let Some(first) = range.split('_').next().and_then(|b| b.parse::<u64>().ok()) {
            found.push((first, entry.path()));
        }
    }
    found.sort();
    found
        .into_iter()
        .map(|(first, path)| SegmentFile::open(segment, first, path))
        .collect()
}

/// Hands each change of a change-set `segment` in blocks from `from` on
/// to `row` as `(block, value)`, in block order and, within a block, in
/// the node's row order.
pub(super) fn for_each_change(
    datadir: &Path,
    segment: Segment,
    from: u64,
    mut row: impl FnMut(u64, &[u8]) -> Result<(), RethError>,
) -> Result<(), RethError> {
    for file in segment_files(datadir, segment)? {
        let csoff_path = PathBuf::from(format!("{}.csoff", file.path.display()));
        let csoff = std::fs::read(&csoff_path).map_err(|e| segment.malformed(&csoff_path, e))?;
        if csoff.len() % 16 != 0 {
            return Err(segment.malformed(
                &csoff_path,
                format_args!("{} bytes, not whole (row, count) pairs", csoff.len()),
            ));
        }
        for (i, pair) in csoff.chunks_exact(16).enumerate() {
            let start = u64::from_le_bytes(pair[..8].try_into().expect("8 bytes"));
            let count = u64::from_le_bytes(pair[8..].try_into().expect("8 bytes"));
            let block = file.first_block + i as u64;
            if block < from {
                continue;
            }
            file.for_each_value(start, count, |_, value| row(block, value))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a change-set segment file of `values` whose blocks from 0
    /// hold `per_block` rows each, with an offsets file of `width` bytes.
    fn write_segment(dir: &Path, values: &[&[u8]], per_block: &[(u64, u64)], width: u8) {
        let static_files = dir.join("static_files");
        std::fs::create_dir_all(&static_files).unwrap();
        let data_path = static_files.join("static_file_storage-change-sets_0_499999");
        std::fs::write(&data_path, values.concat()).unwrap();
        let mut offsets = vec![width];
        let mut at = 0u64;
        for v in values.iter().map(|v| v.len() as u64).chain([0]) {
            let le = at.to_le_bytes();
            offsets.extend((0..width as usize).map(|i| le.get(i).copied().unwrap_or(0)));
            at += v;
        }
        std::fs::write(format!("{}.off", data_path.display()), offsets).unwrap();
        let csoff: Vec<u8> = per_block
            .iter()
            .flat_map(|(start, n)| [start.to_le_bytes(), n.to_le_bytes()].concat())
            .collect();
        std::fs::write(format!("{}.csoff", data_path.display()), csoff).unwrap();
    }

    fn changes(dir: &Path, from: u64) -> Result<Vec<(u64, Vec<u8>)>, RethError> {
        let mut out = Vec::new();
        for_each_change(dir, Segment::StorageChangeSets, from, |block, value| {
            out.push((block, value.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn reads_the_rows_of_each_block() {
        let dir = tempfile::tempdir().unwrap();
        let values: [&[u8]; 3] = [b"ab", b"", b"cde"];
        write_segment(dir.path(), &values, &[(0, 2), (2, 0), (2, 1)], 2);
        let all = changes(dir.path(), 0).unwrap();
        assert_eq!(
            all,
            vec![(0, b"ab".to_vec()), (0, Vec::new()), (2, b"cde".to_vec())]
        );
        assert_eq!(changes(dir.path(), 1).unwrap(), vec![(2, b"cde".to_vec())]);
        // No static files at all: no changes.
        let empty = tempfile::tempdir().unwrap();
        assert!(changes(empty.path(), 0).unwrap().is_empty());
    }

    #[test]
    fn malformed_files_are_errors() {
        let malformed = |values: &[&[u8]], per_block: &[(u64, u64)], width: u8| {
            let dir = tempfile::tempdir().unwrap();
            write_segment(dir.path(), values, per_block, width);
            matches!(
                changes(dir.path(), 0),
                Err(RethError::Malformed { table, .. }) if table == Segment::StorageChangeSets.table()
            )
        };
        // Rows beyond the offsets, a count that overflows, offset widths
        // that cannot be.
        assert!(malformed(&[b"ab"], &[(0, 2)], 2));
        assert!(malformed(&[b"ab"], &[(1, u64::MAX)], 2));
        assert!(malformed(&[b"ab"], &[(0, 1)], 0));
        assert!(malformed(&[b"ab"], &[(0, 1)], 9));
        // A `.csoff` that is not whole pairs; offsets out of order or past
        // the data; an empty offsets file.
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), &[b"ab"], &[(0, 1)], 2);
        let data = dir
            .path()
            .join("static_files/static_file_storage-change-sets_0_499999");
        std::fs::write(format!("{}.csoff", data.display()), [0u8; 15]).unwrap();
        assert!(changes(dir.path(), 0).is_err());
        std::fs::write(
            format!("{}.csoff", data.display()),
            [[0u8; 8], 1u64.to_le_bytes()].concat(),
        )
        .unwrap();
        assert_eq!(changes(dir.path(), 0).unwrap().len(), 1);
        std::fs::write(format!("{}.off", data.display()), [1, 2, 1]).unwrap();
        assert!(changes(dir.path(), 0).is_err());
        std::fs::write(format!("{}.off", data.display()), [1, 0, 9]).unwrap();
        assert!(changes(dir.path(), 0).is_err());
        std::fs::write(format!("{}.off", data.display()), []).unwrap();
        assert!(changes(dir.path(), 0).is_err());
    }
}
