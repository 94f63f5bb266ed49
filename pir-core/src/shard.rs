//! Row shards. An answer is linear in the database's rows
//! (`v . D = sum over shards of v[rows_i] . D[rows_i]`), so a database can
//! be served by S processes, each holding a contiguous range of rows: a
//! query is cut into one slice per shard, each shard answers its slice,
//! and the partial answers add up (mod 2^32) to exactly the answer of the
//! whole database, which the client checks as always.

use std::ops::Range;

use crate::error::{AnswerError, ParamError};
use crate::wire::{Query, Response};

/// Which shard a server is: `index` of `count` (`"i/S"` on command lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `"i/S"` (0-based `i`, `i < S`).
    pub fn parse(s: &str) -> Result<Shard, ParamError> {
        let bad = ParamError::Shape("a shard is written i/S with 0 <= i < S");
        let (i, n) = s.split_once('/').ok_or(bad.clone())?;
        let shard = Shard {
            index: i.trim().parse().map_err(|_| bad.clone())?,
            count: n.trim().parse().map_err(|_| bad.clone())?,
        };
        match shard.index < shard.count {
            true => Ok(shard),
            false => Err(bad),
        }
    }

    /// This shard's rows of a database of `rows` rows.
    pub fn rows(&self, rows: usize) -> Result<Range<usize>, ParamError> {
        shard_rows(rows, self.index, self.count)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The rows of shard `index` of `count` in a database of `rows` rows (a
/// multiple of 4): contiguous, whole groups of 4, every shard but the last
/// the same size. Shards and the router that splits queries for them both
/// use this, so they agree on the split.
pub fn shard_rows(rows: usize, index: u32, count: u32) -> Result<Range<usize>, ParamError> {
    if count == 0 || index >= count {
        return Err(ParamError::Shape("shard index out of range"));
    }
    let groups = rows / 4;
    let per = groups.div_ceil(count as usize);
    let start = (per * index as usize).min(groups);
    let end = (start + per).min(groups);
    if start == end {
        return Err(ParamError::Shape("more shards than row groups"));
    }
    Ok(start * 4..end * 4)
}

/// The slice of a whole-database query that the shard holding `rows`
/// answers.
pub fn slice_query(query: &Query, rows: Range<usize>) -> Query {
    Query {
        setup_id: query.setup_id,
        vector: query.vector[rows].to_vec(),
    }
}

/// The answer over all rows from every shard's partial answer to its slice
/// (added mod 2^32). Partial answers of different lengths are refused.
pub fn combine_answers(parts: &[Response]) -> Result<Response, AnswerError> {
    let Some(first) = parts.first() else {
        return Err(AnswerError::EmptyBatch);
    };
    let mut sum = first.clone();
    for part in &parts[1..] {
        add_answer(&mut sum, part)?;
    }
    Ok(sum)
}

/// Adds one shard's partial answer into a running sum (mod 2^32); one of
/// another length is refused.
pub fn add_answer(sum: &mut Response, part: &Response) -> Result<(), AnswerError> {
    if part.elems.len() != sum.elems.len() {
        return Err(AnswerError::RowCount {
            expected: sum.elems.len(),
            got: part.elems.len(),
        });
    }
    for (e, &x) in sum.elems.iter_mut().zip(&part.elems) {
        *e = e.wrapping_add(x);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_row_once() {
        for rows in [4usize, 8, 400, 1 << 20, 1_000_004] {
            for count in 1..=7u32 {
                let ranges: Result<Vec<_>, _> =
                    (0..count).map(|i| shard_rows(rows, i, count)).collect();
                let Ok(ranges) = ranges else {
                    assert!(rows / 4 < count as usize, "{rows} rows, {count} shards");
                    continue;
                };
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges.last().unwrap().end, rows);
                for pair in ranges.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start);
                }
                assert!(ranges.iter().all(|r| r.start % 4 == 0 && !r.is_empty()));
            }
        }
        assert!(shard_rows(8, 3, 3).is_err());
    }

    #[test]
    fn shard_names_parse() {
        assert_eq!(Shard::parse("1/3"), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/3", "1", "a/3", "1/0", "-1/3", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Shard { index: 2, count: 5 }.to_string(), "2/5");
    }

    #[test]
    fn combining_refuses_mismatched_parts() {
        let a = Response {
            elems: vec![u32::MAX, 1],
        };
        let b = Response { elems: vec![2, 3] };
        assert_eq!(combine_answers(&[a.clone(), b]).unwrap().elems, vec![1, 4]);
        assert!(combine_answers(&[a, Response { elems: vec![1] }]).is_err());
        assert!(combine_answers(&[]).is_err());
    }
}
