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
    // SAFETY: see the contract above; the file is read-only to this
    // process and never written in place by the store.
    unsafe { map_whole(path) }
}

/// Maps the whole of the regular file at `path` read-only.
///
/// # Safety
///
/// The caller guarantees that nothing changes the file while it is
/// mapped (each caller above states why).
unsafe fn map_whole(path: &Path) -> std::io::Result<SharedBytes> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    assert!(meta.is_file(), "only regular files are mapped");
    // SAFETY: the caller's contract.
    let map = unsafe { memmap2::MmapOptions::new().map(&file)? };
    assert_eq!(map.len() as u64, meta.len(), "the whole file is mapped");
    Ok(Arc::new(map))
}

/// Asserts that `path` is a file of a snapshot being staged.
fn assert_staged(path: &Path) {
    assert!(
        path.components().any(|c| c.as_os_str() == ".staging"),
        "only staged snapshot files are mapped for building"
    );
}

/// Maps, read-write, a staged file this process has just created and
/// sized (`db.bin` laid out in place by the encoder).
///
/// # Safety (why the `unsafe` below is sound)
///
/// A staged snapshot's folder is created fresh, with a unique name, by
/// `SnapshotStore::stage`, and only the `StagedSnapshot` that owns it
/// writes there; builds of one store are serialised by the build lock,
/// and a leftover folder is only removed by the next build under that
/// lock. So nothing else changes the file while it is mapped. The
/// asserts hold the contract that this is such a file: a regular file
/// under `.staging/`, of the length the caller has just set.
pub(crate) fn map_staged_mut(
    file: &File,
    path: &Path,
    len: u64,
) -> std::io::Result<memmap2::MmapMut> {
    assert_staged(path);
    let meta = file.metadata()?;
    assert!(meta.is_file(), "only regular files are mapped");
    assert_eq!(meta.len(), len, "the file was sized before it is mapped");
    // SAFETY: see the contract above.
    let map = unsafe { memmap2::MmapOptions::new().map_mut(file)? };
    assert_eq!(map.len() as u64, len, "the whole file is mapped");
    Ok(map)
}

/// Maps, read-only, a staged file that is written and fsynced (the
/// encoder reads `records.bin` from it).
///
/// # Safety (why the `unsafe` below is sound)
///
/// As for [`map_staged_mut`]: only the owning `StagedSnapshot` writes its
/// folder, and it writes a file once, whole, before recording its digest;
/// the caller maps only files whose digest is recorded, so the file no
/// longer changes.
pub(crate) fn map_staged(path: &Path) -> std::io::Result<SharedBytes> {
    assert_staged(path);
    // SAFETY: see the contract above.
    unsafe { map_whole(path) }
}
