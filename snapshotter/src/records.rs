//! `records.bin`: the exported accounts of a snapshot, sorted by PIR key.
//!
//! Header `"EPRC"`, version 1, 3 zero bytes, record count (u64 LE), then
//! 93 bytes per record: flags (bit 0: address known), address (20), key
//! (32), balance (32, big-endian), nonce (u64 LE).

use alloy_primitives::{Address, B256, U256};

use crate::account::AccountRecord;

const MAGIC: &[u8; 4] = b"EPRC";
const RECORD_BYTES: usize = 93;
const HEADER_BYTES: usize = 16;

/// Malformed `records.bin`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordsError {
    #[error("not a records file (bad magic or version)")]
    Header,
    #[error("records file holds {got} bytes, its header promises {expected}")]
    Length { expected: u64, got: u64 },
    #[error("records are not sorted by key, or a key repeats, at record {0}")]
    Order(usize),
    #[error("record {0} has a key that is not keccak256 of its address")]
    Key(usize),
}

/// Serialises records (which must be sorted by key).
pub fn encode_records(records: &[AccountRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + RECORD_BYTES * records.len());
    write_records(records, &mut out).expect("writing to memory");
    out
}

/// Writes what [`encode_records`] makes to `w`, record by record (a base
/// of 10^8 accounts is ~9 GB: never held a second time).
pub fn write_records(
    records: &[AccountRecord],
    w: &mut (impl std::io::Write + ?Sized),
) -> std::io::Result<()> {
    w.write_all(MAGIC)?;
    w.write_all(&[1, 0, 0, 0])?;
    w.write_all(&(records.len() as u64).to_le_bytes())?;
    let mut one = [0u8; RECORD_BYTES];
    for r in records {
        one[0] = r.address.is_some() as u8;
        one[1..21].copy_from_slice(r.address.unwrap_or_default().as_slice());
        one[21..53].copy_from_slice(r.key.as_slice());
        one[53..85].copy_from_slice(&r.balance.to_be_bytes::<32>());
        one[85..93].copy_from_slice(&r.nonce.to_le_bytes());
        w.write_all(&one)?;
    }
    Ok(())
}

/// Parses and checks `records.bin`.
pub fn decode_records(bytes: &[u8]) -> Result<Vec<AccountRecord>, RecordsError> {
    if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC || bytes[4..8] != [1, 0, 0, 0] {
        return Err(RecordsError::Header);
    }
    let count = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let expected = (HEADER_BYTES as u64).saturating_add(count.saturating_mul(RECORD_BYTES as u64));
    if bytes.len() as u64 != expected {
        return Err(RecordsError::Length {
            expected,
            got: bytes.len() as u64,
        });
    }
    let mut out: Vec<AccountRecord> = Vec::with_capacity(count as usize);
    for (i, chunk) in bytes[HEADER_BYTES..].chunks_exact(RECORD_BYTES).enumerate() {
        let address = (chunk[0] & 1 == 1).then(|| Address::from_slice(&chunk[1..21]));
        let key = B256::from_slice(&chunk[21..53]);
        let balance = U256::from_be_slice(&chunk[53..85]);
        let nonce = u64::from_le_bytes(chunk[85..93].try_into().unwrap());
        if let Some(a) = address {
            if crate::account::pir_key(&a) != key {
                return Err(RecordsError::Key(i));
            }
        }
        if out.last().is_some_and(|prev| prev.key >= key) {
            return Err(RecordsError::Order(i));
        }
        out.push(AccountRecord {
            address,
            key,
            balance,
            nonce,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut recs: Vec<AccountRecord> = (1u8..=5)
            .map(|i| AccountRecord::new(Address::repeat_byte(i), U256::from(i), i as u64))
            .collect();
        recs.push(AccountRecord::from_hashed(
            B256::repeat_byte(9),
            U256::MAX,
            1,
        ));
        recs.sort_by_key(|r| r.key);
        let bytes = encode_records(&recs);
        assert_eq!(decode_records(&bytes).unwrap(), recs);
        assert!(decode_records(&bytes[..bytes.len() - 1]).is_err());
        assert_eq!(decode_records(b"nope"), Err(RecordsError::Header));
        let mut swapped = recs.clone();
        swapped.swap(0, 1);
        assert!(matches!(
            decode_records(&encode_records(&swapped)),
            Err(RecordsError::Order(1))
        ));
    }
}
