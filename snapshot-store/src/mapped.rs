//! The one memory map of the store: a published `db.bin`, answered from
//! in place.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use pir_core::db::SharedBytes;

/// Maps a published snapshot's file read-only.
///
/// # Safety (why the `unsafe` below is sound)
///
/// A memory map is undefined behaviour in Rust's model only if the file
/// changes while mapped. The store never writes a published file: a
/// snapshot is written whole under `.staging/` and published by one
/// `rename`; it is removed by a rename into `.trash/` and an unlink, which
/// leaves a mapped file's pages in place until the map is dropped. The
/// asserts below hold the contract that this is such a file: a regular
/// file inside a published snapshot's folder (not under `.staging/`),
/// whose length the caller has just checked with its digest.
pub(crate) fn map_published(path: &Path) -> std::io::Result<SharedBytes> {
    assert!(
        !path
            .components()
            .any(|c| c.as_os_str() == ".staging" || c.as_os_str() == ".trash"),
        "only published snapshot files are mapped"
    );
    let file = File::open(path)?;
    let meta = file.metadata()?;
    assert!(meta.is_file(), "only regular files are mapped");
    // SAFETY: see the contract above; the file is read-only to this
    // process and never written in place by the store.
    let map = unsafe { memmap2::MmapOptions::new().map(&file)? };
    assert_eq!(map.len() as u64, meta.len(), "the whole file is mapped");
    Ok(Arc::new(map))
}
