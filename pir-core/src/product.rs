//! Drivers that spread vector x database products over all cores: answers
//! (a few query vectors) and the hint (the public matrix's rows, made on the
//! fly block by block so that the matrix never exists whole).

use rayon::prelude::*;

use crate::db::EncodedDb;
use crate::kernel::{accumulate_panel, active, Kernel, SlicedVec, TILE_GROUPS};
use crate::matrix::{PublicMatrix, BLOCK_COLS};

/// `v . D` for each vector (one entry per served row, sliced, all for one
/// kernel: a shard's vectors hold its rows only), in one pass over the
/// served rows. Returns `cols` elements per
/// vector.
///
/// The work is cut into (panel, row range) items, at least two per core:
/// with few panels (a wide square layout has many, a narrow one few) the
/// rows are split too, so even a single query's answer runs on every core.
/// Each item streams its tiles once for the whole batch; partial sums of a
/// panel's row ranges are added at the end.
pub fn multiply(db: &EncodedDb, vecs: &[&SlicedVec]) -> Vec<Vec<u32>> {
    let Some(kernel) = vecs.first().map(|v| v.kernel()) else {
        return Vec::new();
    };
    assert!(
        vecs.iter().all(|v| v.kernel() == kernel),
        "all vectors of a product must be split for one kernel"
    );
    let shape = db.shape();
    // A shard serves a range of rows; its vectors hold those rows only.
    let served = db.served_rows();
    let (first_group, groups) = (served.start / 4, served.end / 4);
    assert!(
        vecs.iter()
            .all(|v| v.planes().len() == groups - first_group),
        "one sliced entry per served row group"
    );
    let panels = db.panels();
    // Enough work items for every core: split rows too when panels are few.
    let threads = rayon::current_num_threads();
    let tiles = (groups - first_group).div_ceil(TILE_GROUPS).max(1);
    let splits = (2 * threads).div_ceil(panels).clamp(1, tiles);
    let chunk = (groups - first_group)
        .div_ceil(splits)
        .next_multiple_of(TILE_GROUPS)
        .max(TILE_GROUPS);
    let items: Vec<(usize, usize)> = (0..panels)
        .flat_map(|p| (first_group..groups).step_by(chunk).map(move |g| (p, g)))
        .collect();
    let partials: Vec<(usize, Vec<Vec<u32>>)> = items
        .into_par_iter()
        .map(|(p, g0)| {
            let g1 = (g0 + chunk).min(groups);
            let (_, width) = db.panel_columns(p);
            let mut outs: Vec<Vec<u32>> = vec![vec![0u32; width]; vecs.len()];
            let planes: Vec<&[[u32; 4]]> = vecs
                .iter()
                .map(|v| &v.planes()[g0 - first_group..g1 - first_group])
                .collect();
            let mut out_refs: Vec<&mut [u32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            accumulate_panel(kernel, db, p, g0..g1, &planes, &mut out_refs);
            (p, outs)
        })
        .collect();
    let mut results = vec![vec![0u32; shape.padded_cols()]; vecs.len()];
    for (p, outs) in partials {
        let (first, width) = db.panel_columns(p);
        for (res, part) in results.iter_mut().zip(outs) {
            for (r, x) in res[first..first + width].iter_mut().zip(part) {
                *r = r.wrapping_add(x);
            }
        }
    }
    for r in &mut results {
        r.truncate(shape.cols());
    }
    results
}

/// `v . D` for each plain vector (one entry per served row), split for the
/// active kernel first: [`multiply`] for callers holding `u32` vectors
/// (the server's queries, and the GPU's checks against the CPU).
pub fn multiply_vectors(db: &EncodedDb, vecs: &[&[u32]]) -> Vec<Vec<u32>> {
    let sliced: Vec<SlicedVec> = vecs.iter().map(|v| SlicedVec::new(v)).collect();
    multiply(db, &sliced.iter().collect::<Vec<_>>())
}

/// Public-matrix rows handled together by one task of the hint build.
const HINT_ROWS_PER_TASK: usize = 16;

/// The hint `M = A . D` (`n` rows of `cols` elements, row-major) on all CPU
/// cores. Each task makes its own rows of `A` one block at a time, so peak
/// memory stays at the database plus the hint.
pub fn hint_cpu(
    db: &EncodedDb,
    matrix: &PublicMatrix,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<u32> {
    hint_cpu_with(active(), db, matrix, progress)
}

/// Where a hint `M = A . D` is made. The build pipeline takes one: the CPU
/// ([`CpuHint`]) unless the operator's build passes a GPU (`gpu-kernels`
/// implements this for its device choice), so that a build that never
/// uses a GPU does not link one. Every builder makes the same numbers.
pub trait HintBuilder: Send + Sync {
    /// The hint of `db` under `matrix`, and where and how it was made
    /// (the manifest's `hint_device`). `progress` is told of work done.
    fn build_hint(
        &self,
        db: &EncodedDb,
        matrix: &PublicMatrix,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(Vec<u32>, String), HintBuildError>;

    /// What the builder is, for logs (`cpu`, `auto`, `cuda`).
    fn name(&self) -> String;
}

/// Why a hint builder failed (a GPU's driver, compiler or memory).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HintBuildError(pub Box<dyn std::error::Error + Send + Sync>);

/// The hint on all CPU cores with the kernel this CPU runs best.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuHint;

impl HintBuilder for CpuHint {
    fn build_hint(
        &self,
        db: &EncodedDb,
        matrix: &PublicMatrix,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(Vec<u32>, String), HintBuildError> {
        let hint = hint_cpu(db, matrix, progress);
        Ok((hint, format!("cpu ({})", cpu_detail())))
    }

    fn name(&self) -> String {
        "cpu".into()
    }
}

/// The CPU hint's kernel and thread count, as the manifest records them.
pub fn cpu_detail() -> String {
    format!(
        "{} kernel on {} threads",
        active().name(),
        rayon::current_num_threads()
    )
}

/// [`hint_cpu`] with a given kernel (tests check every kernel the CPU has).
pub fn hint_cpu_with(
    kernel: Kernel,
    db: &EncodedDb,
    matrix: &PublicMatrix,
    progress: &(dyn Fn(usize) + Sync),
) -> Vec<u32> {
    assert!(db.is_whole(), "the hint is made from every row");
    let shape = db.shape();
    let n = shape.lwe.dimension as usize;
    let rows = shape.rows();
    let padded = shape.padded_cols();
    let cols = shape.cols();
    let panels = db.panels();
    let chunks: Vec<Vec<u32>> = (0..n.div_ceil(HINT_ROWS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let first = task * HINT_ROWS_PER_TASK;
            let count = HINT_ROWS_PER_TASK.min(n - first);
            let mut out = vec![0u32; count * padded];
            let mut blocks = vec![vec![0u32; BLOCK_COLS]; count];
            let mut sliced: Vec<SlicedVec> = vec![SlicedVec::empty(kernel); count];
            for b in 0..rows.div_ceil(BLOCK_COLS) {
                let start = b * BLOCK_COLS;
                let len = BLOCK_COLS.min(rows - start);
                let mut items: Vec<(u32, u32, &mut [u32])> = blocks
                    .iter_mut()
                    .enumerate()
                    .map(|(q, block)| ((first + q) as u32, b as u32, &mut block[..len]))
                    .collect();
                matrix.expand_blocks(kernel, &mut items);
                for (s, block) in sliced.iter_mut().zip(&blocks) {
                    s.refill(&block[..len]);
                }
                let planes: Vec<&[[u32; 4]]> = sliced.iter().map(|s| s.planes()).collect();
                let groups = start / 4..(start + len) / 4;
                for p in 0..panels {
                    let (c0, width) = db.panel_columns(p);
                    let mut outs: Vec<&mut [u32]> = out
                        .chunks_mut(padded)
                        .map(|row| &mut row[c0..c0 + width])
                        .collect();
                    accumulate_panel(kernel, db, p, groups.clone(), &planes, &mut outs);
                }
            }
            progress(count);
            out.chunks(padded)
                .flat_map(|row| row[..cols].iter().copied())
                .collect()
        })
        .collect();
    chunks.concat()
}
