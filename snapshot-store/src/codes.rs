//! Contract codes beside the snapshots, by hash (`.codes/<first byte>/<hash>`),
//! shared by every snapshot of every chain (a code's hash is its name, so
//! one file serves every account and every snapshot with that code), and
//! each snapshot's code table (`codes.bin`: the sorted hashes its values
//! name by place, see `protocol::codes`).

use std::fs;
use std::io::Read;
use std::path::PathBuf;

use alloy_primitives::{keccak256, B256};
use protocol::codes::{check_code, MAX_CODE_BYTES};

use crate::{io, listed, SnapshotStore, StoreError, StoredSnapshot};

/// A snapshot's code table: 32-byte hashes, sorted, each once.
pub const CODES_FILE: &str = "codes.bin";
const CODES_DIR: &str = ".codes";

impl SnapshotStore {
    /// Where the code of `hash` lives.
    pub fn code_path(&self, hash: &B256) -> PathBuf {
        let hex = format!("{hash:x}");
        self.root.join(CODES_DIR).join(&hex[2..4]).join(&hex[2..])
    }

    /// Whether the code of `hash` is kept.
    pub fn has_code(&self, hash: &B256) -> bool {
        self.code_path(hash).is_file()
    }

    /// Keeps `code` under its hash (written whole, then renamed into
    /// place: a reader never sees half of one); its hash.
    pub fn put_code(&self, code: &[u8]) -> Result<B256, StoreError> {
        let hash = keccak256(code);
        let path = self.code_path(&hash);
        if path.is_file() {
            return Ok(hash);
        }
        let dir = path.parent().expect("a code's folder");
        fs::create_dir_all(dir).map_err(io(dir))?;
        let partial = path.with_extension("partial");
        fs::write(&partial, code).map_err(io(&partial))?;
        fs::rename(&partial, &path).map_err(io(&path))?;
        Ok(hash)
    }

    /// The code of `hash`, when kept (read within the bound a client
    /// takes, and checked against its name).
    pub fn read_code(&self, hash: &B256) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.code_path(hash);
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let mut code = Vec::new();
        file.take(MAX_CODE_BYTES as u64 + 1)
            .read_to_end(&mut code)
            .map_err(io(&path))?;
        check_code(hash, &code).map_err(|e| StoreError::Code {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        Ok(Some(code))
    }

    /// A snapshot's code table (empty when it has none), checked against
    /// its manifest's digest and size.
    pub fn read_code_table(&self, snap: &StoredSnapshot) -> Result<Vec<B256>, StoreError> {
        if listed(snap, CODES_FILE).is_err() {
            return Ok(Vec::new());
        }
        let bytes = self.read_checked(snap, CODES_FILE)?;
        let table: Vec<B256> = bytes.chunks_exact(32).map(B256::from_slice).collect();
        let invalid = |problem: &str| StoreError::Invalid {
            id: snap.id,
            problem: format!("{CODES_FILE}: {problem}"),
        };
        if bytes.len() % 32 != 0 || !table.windows(2).all(|w| w[0] < w[1]) {
            return Err(invalid("not sorted 32-byte hashes"));
        }
        let count = snap.manifest.codes.map_or(0, |c| c.count as usize);
        if count != table.len() {
            return Err(invalid("another size than the manifest's"));
        }
        Ok(table)
    }
}

/// The bytes of `codes.bin` for a table.
pub fn code_table_bytes(table: &[B256]) -> Vec<u8> {
    table.iter().flat_map(|h| h.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_kept_by_hash_and_checked_when_read() {
        let dir = std::env::temp_dir().join(format!("codes-{}", std::process::id()));
        let store = SnapshotStore::open(&dir).unwrap();
        let code = vec![0x60, 0x00, 0x60, 0x00, 0xf3];
        let hash = store.put_code(&code).unwrap();
        assert_eq!(hash, keccak256(&code));
        assert_eq!(store.put_code(&code).unwrap(), hash);
        assert_eq!(store.read_code(&hash).unwrap(), Some(code));
        assert_eq!(store.read_code(&keccak256([1])).unwrap(), None);
        // A file whose bytes are not its name's: an error, not the bytes.
        fs::write(store.code_path(&hash), [0xfe]).unwrap();
        assert!(store.read_code(&hash).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
