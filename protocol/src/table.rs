//! `table.bin`: a level small enough to be downloaded whole (brief section
//! 4: trivial PIR). Everyone who reads it downloads the same bytes, so the
//! server learns nothing from it, and a lookup in it costs no query.
//!
//! Format: `EPTB`, version 1, the value width (u8), two zero bytes, the
//! entry count (u64 LE), then per entry the first 16 bytes of the PIR key
//! and the PIR value (the same encoding as the PIR database), sorted by
//! key prefix, no prefix twice. Sixteen bytes of keccak256 keep a false
//! match below 2^-100 per lookup even against 2^28 accounts.

pub const TABLE_MAGIC: &[u8; 4] = b"EPTB";
/// Bytes of the PIR key kept per entry.
pub const KEY_PREFIX: usize = 16;
const HEADER: usize = 16;

/// Why bytes are not a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("not a table (bad magic, version or value width)")]
    Header,
    #[error("table of {got} bytes, its header promises {expected}")]
    Length { expected: u64, got: u64 },
    #[error("{0} entries, over the limit of {1}")]
    TooMany(u64, u64),
    #[error("entries out of order or repeated at entry {0}")]
    Order(usize),
}

/// A parsed table: lookups by binary search.
#[derive(Clone, Debug)]
pub struct Table {
    width: usize,
    bytes: Vec<u8>,
}

fn prefix(key: &[u8; 32]) -> &[u8] {
    &key[..KEY_PREFIX]
}

/// Encodes `(PIR key, value)` pairs sorted by key, each value `width`
/// bytes. `None` when two keys share a prefix (the level is then served
/// by PIR only).
pub fn encode_table(entries: &[([u8; 32], Vec<u8>)], width: usize) -> Option<Vec<u8>> {
    let mut out = header(width, entries.len())?;
    for (i, (key, value)) in entries.iter().enumerate() {
        assert_eq!(value.len(), width, "value width");
        if i > 0 && prefix(&entries[i - 1].0) >= prefix(key) {
            return None;
        }
        out.extend_from_slice(prefix(key));
        out.extend_from_slice(value);
    }
    Some(out)
}

/// A table's header, with room for `count` entries of `width`-byte
/// values.
fn header(width: usize, count: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(HEADER + count * (KEY_PREFIX + width));
    out.extend_from_slice(TABLE_MAGIC);
    out.extend_from_slice(&[1, u8::try_from(width).ok()?, 0, 0]);
    out.extend_from_slice(&(count as u64).to_le_bytes());
    Some(out)
}

/// The table of adjacent levels laid over one another (`tables` oldest
/// first): every key with its newest value. That is the table a merge of
/// those levels publishes (a merge keeps the newest value of each key,
/// emptied ones included), so a reader that holds them builds it instead
/// of downloading it, and checks it against the published digest.
/// `None` when the widths differ (the merge's width is then not theirs).
pub fn overlay(tables: &[&Table]) -> Option<Vec<u8>> {
    let width = tables.first()?.width;
    if tables.iter().any(|t| t.width != width) {
        return None;
    }
    // Sorted runs merged pairwise, the newer run winning ties.
    let mut merged: Vec<&[u8]> = Vec::new();
    for table in tables {
        let newer = (0..table.len()).map(|i| table.entry(i));
        merged = crate::view::newest_of(merged.into_iter(), newer, |e| &e[..KEY_PREFIX]).collect();
    }
    let mut out = header(width, merged.len())?;
    for entry in merged {
        out.extend_from_slice(entry);
    }
    Some(out)
}

impl Table {
    /// Parses and checks a table of at most `max_entries` entries.
    pub fn parse(bytes: Vec<u8>, max_entries: u64) -> Result<Table, TableError> {
        if bytes.len() < HEADER || &bytes[..4] != TABLE_MAGIC || bytes[4] != 1 || bytes[5] == 0 {
            return Err(TableError::Header);
        }
        let width = bytes[5] as usize;
        let count = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        if count > max_entries {
            return Err(TableError::TooMany(count, max_entries));
        }
        let entry = (KEY_PREFIX + width) as u64;
        let expected = HEADER as u64 + count * entry;
        if bytes.len() as u64 != expected {
            return Err(TableError::Length {
                expected,
                got: bytes.len() as u64,
            });
        }
        let table = Table { width, bytes };
        for i in 1..count as usize {
            if table.key(i - 1) >= table.key(i) {
                return Err(TableError::Order(i));
            }
        }
        Ok(table)
    }

    pub fn len(&self) -> usize {
        (self.bytes.len() - HEADER) / (KEY_PREFIX + self.width)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn entry(&self, i: usize) -> &[u8] {
        let size = KEY_PREFIX + self.width;
        &self.bytes[HEADER + i * size..HEADER + (i + 1) * size]
    }

    fn key(&self, i: usize) -> &[u8] {
        &self.entry(i)[..KEY_PREFIX]
    }

    /// The value stored under a PIR key, if any.
    pub fn get(&self, key: &[u8; 32]) -> Option<&[u8]> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(prefix(key)) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(&self.entry(mid)[KEY_PREFIX..]),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_bad_bytes() {
        let mut entries: Vec<([u8; 32], Vec<u8>)> = (1u8..=40)
            .map(|i| ([i.wrapping_mul(37); 32], vec![i; 3]))
            .collect();
        entries.sort();
        let bytes = encode_table(&entries, 3).unwrap();
        let t = Table::parse(bytes.clone(), 100).unwrap();
        assert_eq!(t.len(), 40);
        for (k, v) in &entries {
            assert_eq!(t.get(k), Some(v.as_slice()));
        }
        assert_eq!(t.get(&[0xff; 32]), None);
        assert_eq!(
            Table::parse(bytes.clone(), 10).unwrap_err(),
            TableError::TooMany(40, 10)
        );
        for cut in [0, 5, 16, bytes.len() - 1] {
            assert!(Table::parse(bytes[..cut].to_vec(), 100).is_err());
        }
        let mut swapped = bytes.clone();
        swapped[16..35].copy_from_slice(&bytes[35..54]);
        assert!(matches!(
            Table::parse(swapped, 100),
            Err(TableError::Order(_))
        ));
        let mut same = entries.clone();
        let first = same[0].0;
        same[1].0[..KEY_PREFIX].copy_from_slice(&first[..KEY_PREFIX]);
        same[1].0[31] ^= 1;
        same.sort();
        assert!(encode_table(&same, 3).is_none());
    }

    fn table_of(entries: &std::collections::BTreeMap<[u8; 32], Vec<u8>>, width: usize) -> Table {
        let entries: Vec<([u8; 32], Vec<u8>)> =
            entries.iter().map(|(k, v)| (*k, v.clone())).collect();
        Table::parse(encode_table(&entries, width).unwrap(), 1 << 20).unwrap()
    }

    #[test]
    fn overlays_equal_the_table_of_the_newest_values() {
        use std::collections::BTreeMap;
        // Three levels over a shared key space: keys repeat across levels,
        // some levels are empty, values change.
        let key = |i: u32| {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&(i.wrapping_mul(2_654_435_761)).to_be_bytes());
            k
        };
        let mut newest: BTreeMap<[u8; 32], Vec<u8>> = BTreeMap::new();
        let mut levels = Vec::new();
        for (n, (start, count)) in [(0u32, 50u32), (30, 0), (40, 30), (0, 5)]
            .iter()
            .enumerate()
        {
            let level: BTreeMap<[u8; 32], Vec<u8>> = (*start..start + count)
                .map(|i| (key(i), vec![n as u8, i as u8, 7]))
                .collect();
            newest.extend(level.clone());
            levels.push(table_of(&level, 3));
        }
        let refs: Vec<&Table> = levels.iter().collect();
        let expected: Vec<([u8; 32], Vec<u8>)> = newest.into_iter().collect();
        assert_eq!(overlay(&refs).unwrap(), encode_table(&expected, 3).unwrap());
        assert_eq!(
            overlay(&refs[..1]).unwrap(),
            encode_table(
                &(0..50)
                    .map(|i| (key(i), vec![0, i as u8, 7]))
                    .collect::<BTreeMap<_, _>>()
                    .into_iter()
                    .collect::<Vec<_>>(),
                3
            )
            .unwrap()
        );
        // Another width: no overlay (the merge's width is not theirs).
        let wider = table_of(&BTreeMap::from([(key(1), vec![1; 4])]), 4);
        assert!(overlay(&[&levels[0], &wider]).is_none());
        assert!(overlay(&[]).is_none());
    }
}
