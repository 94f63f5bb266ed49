//! Accounts handed over in key order by a source that cannot say how many
//! there will be (a state dump read as a stream), kept in a file until
//! the count is known: `records.bin` names the count before the accounts.
//! Mainnet's ~3.5e8 accounts are ~55 GB of spill (157 bytes an account,
//! the format of `records.bin`), never more than a buffer in memory.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use alloy_primitives::B256;
use protocol::account::AccountRecord;

use crate::records::{account_bytes, parse_account, RECORD_BYTES};

/// Collects accounts in key order into a file (removed if it is dropped
/// before [`AccountSpill::finish`]).
pub struct AccountSpill {
    path: PathBuf,
    out: BufWriter<File>,
    count: u64,
    last: Option<B256>,
}

impl AccountSpill {
    /// A spill in the file `path` (created, its folder too; removed with
    /// the spilled accounts).
    pub fn create(path: PathBuf) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        Ok(AccountSpill {
            path,
            out,
            count: 0,
            last: None,
        })
    }

    /// Accounts pushed so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds `account`, refusing one that is not after the last by key.
    pub fn push(&mut self, account: &AccountRecord) -> std::io::Result<()> {
        if self.last.is_some_and(|last| last >= account.key) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("account {} is out of key order", account.key),
            ));
        }
        self.out.write_all(&account_bytes(account))?;
        self.last = Some(account.key);
        self.count += 1;
        Ok(())
    }

    /// The accounts pushed, to be read back once in the same order.
    pub fn finish(mut self) -> std::io::Result<SpilledAccounts> {
        self.out.flush()?;
        let reader = BufReader::with_capacity(1 << 20, File::open(&self.path)?);
        Ok(SpilledAccounts {
            // The file is the spilled accounts' to remove from here on.
            path: std::mem::take(&mut self.path),
            reader,
            left: self.count,
            count: self.count,
            failed: None,
        })
    }
}

impl Drop for AccountSpill {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The accounts of an [`AccountSpill`], in the order they came; the file
/// is removed when this is dropped.
pub struct SpilledAccounts {
    path: PathBuf,
    reader: BufReader<File>,
    left: u64,
    count: u64,
    failed: Option<std::io::Error>,
}

impl SpilledAccounts {
    /// How many accounts there are (all of them, however many were read).
    pub fn total(&self) -> u64 {
        self.count
    }

    /// Why the accounts ended early (a read error), if they did: a short
    /// stream must not read as a smaller state.
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        self.failed.take()
    }
}

impl Iterator for SpilledAccounts {
    type Item = AccountRecord;

    fn next(&mut self) -> Option<AccountRecord> {
        if self.left == 0 || self.failed.is_some() {
            return None;
        }
        let mut chunk = [0u8; RECORD_BYTES];
        if let Err(e) = self.reader.read_exact(&mut chunk) {
            self.failed = Some(e);
            return None;
        }
        self.left -= 1;
        Some(parse_account(&chunk))
    }
}

impl Drop for SpilledAccounts {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{keccak256, U256};

    #[test]
    fn accounts_come_back_in_order_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill/accounts");
        let mut accounts: Vec<AccountRecord> = (0..1000u64)
            .map(|i| {
                AccountRecord::from_hashed(keccak256(i.to_le_bytes()), U256::from(i), i)
                    .with_trie(B256::repeat_byte(1), B256::repeat_byte(2))
            })
            .collect();
        accounts.sort_by_key(|a| a.key);
        let mut spill = AccountSpill::create(path.clone()).unwrap();
        for a in &accounts {
            spill.push(a).unwrap();
        }
        let refused = spill.push(&accounts[3]).unwrap_err();
        assert!(
            refused.to_string().contains("out of key order"),
            "{refused}"
        );
        let mut back = spill.finish().unwrap();
        assert_eq!(back.total(), 1000);
        let read: Vec<AccountRecord> = back.by_ref().collect();
        assert!(back.take_error().is_none());
        assert_eq!(read, accounts);
        drop(back);
        assert!(!path.exists());
    }
}
