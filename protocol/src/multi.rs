//! Framing of a request that queries several snapshots at once (every
//! level of a view in one round trip) and of its response. Each part's
//! body is pir-core's wire format for one snapshot, untouched.
//!
//! Request: `EPQ1`, u16 part count, then per part: u8 id length, the id
//! (ASCII), u32 body length, the body. Response: `EPR1`, u16 part count,
//! then per part: u32 length, the body. Little-endian. Parsing never
//! panics and refuses counts, ids and lengths past the limits below.

pub const REQUEST_MAGIC: &[u8; 4] = b"EPQ1";
pub const RESPONSE_MAGIC: &[u8; 4] = b"EPR1";
/// Most snapshots one request may name.
pub const MAX_PARTS: usize = 64;
/// Longest snapshot id.
pub const MAX_ID_LEN: usize = 64;

/// Why bytes are not a multi-snapshot request or response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultiError {
    #[error("not a multi-snapshot message (bad magic)")]
    Magic,
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("{0} parts (1 to {MAX_PARTS} allowed)")]
    Parts(usize),
    #[error("snapshot id of {0} bytes (1 to {MAX_ID_LEN} allowed, ASCII letters, digits and '-')")]
    Id(usize),
    #[error("a part of {0} bytes (at most 4 GiB)")]
    Body(usize),
    #[error("{0} bytes after the last part")]
    Trailing(usize),
}

/// A cursor over bytes that reports where input ran out.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MultiError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(MultiError::Truncated(self.bytes.len()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u16(&mut self) -> Result<usize, MultiError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&mut self) -> Result<usize, MultiError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn magic(&mut self, magic: &[u8; 4]) -> Result<(), MultiError> {
        if self.take(4).map_err(|_| MultiError::Magic)? != magic {
            return Err(MultiError::Magic);
        }
        Ok(())
    }

    fn count(&mut self) -> Result<usize, MultiError> {
        let n = self.u16()?;
        if n == 0 || n > MAX_PARTS {
            return Err(MultiError::Parts(n));
        }
        Ok(n)
    }

    fn finish(&self) -> Result<(), MultiError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(MultiError::Trailing(n)),
        }
    }
}

fn valid_id(id: &[u8]) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

/// Encodes a request: `(snapshot id in URL form, query batch bytes)` per
/// part. Counts, ids and body lengths past the limits are errors, never
/// sent (a [`SnapshotId`](crate::SnapshotId)'s URL form is always a valid
/// id; a view deeper than a request carries is refused here).
pub fn encode_request(parts: &[(&str, &[u8])]) -> Result<Vec<u8>, MultiError> {
    if !(1..=MAX_PARTS).contains(&parts.len()) {
        return Err(MultiError::Parts(parts.len()));
    }
    let size = parts
        .iter()
        .map(|(id, b)| 5 + id.len() + b.len())
        .sum::<usize>();
    let mut out = Vec::with_capacity(6 + size);
    out.extend_from_slice(REQUEST_MAGIC);
    out.extend_from_slice(&(parts.len() as u16).to_le_bytes());
    for (id, body) in parts {
        if !valid_id(id.as_bytes()) {
            return Err(MultiError::Id(id.len()));
        }
        let body_len = u32::try_from(body.len()).map_err(|_| MultiError::Body(body.len()))?;
        out.push(id.len() as u8);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(body);
    }
    Ok(out)
}

/// Decodes a request into `(snapshot id, query batch bytes)` per part.
pub fn decode_request(bytes: &[u8]) -> Result<Vec<(&str, &[u8])>, MultiError> {
    let mut r = Reader { bytes, at: 0 };
    r.magic(REQUEST_MAGIC)?;
    let n = r.count()?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.take(1)?[0] as usize;
        let id = r.take(len)?;
        if !valid_id(id) {
            return Err(MultiError::Id(len));
        }
        let id = std::str::from_utf8(id).map_err(|_| MultiError::Id(len))?;
        let body_len = r.u32()?;
        parts.push((id, r.take(body_len)?));
    }
    r.finish()?;
    Ok(parts)
}

/// The exact bytes of a response with parts of these sizes (magic, u16
/// count, then a u32 length before each part).
pub fn response_bytes(parts: impl Iterator<Item = usize>) -> u64 {
    6 + parts.map(|p| 4 + p as u64).sum::<u64>()
}

/// Encodes a response: one answer batch per request part, in order.
pub fn encode_response(parts: &[Vec<u8>]) -> Vec<u8> {
    assert!((1..=MAX_PARTS).contains(&parts.len()), "part count");
    let mut out = Vec::with_capacity(6 + parts.iter().map(|p| 4 + p.len()).sum::<usize>());
    out.extend_from_slice(RESPONSE_MAGIC);
    out.extend_from_slice(&(parts.len() as u16).to_le_bytes());
    for p in parts {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// Decodes a response into its parts.
pub fn decode_response(bytes: &[u8]) -> Result<Vec<&[u8]>, MultiError> {
    let mut r = Reader { bytes, at: 0 };
    r.magic(RESPONSE_MAGIC)?;
    let n = r.count()?;
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()?;
        parts.push(r.take(len)?);
    }
    r.finish()?;
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_round_trip() {
        let req = encode_request(&[("1-0-full", b"abc"), ("1-5-delta-0", b"")]).unwrap();
        let parts = decode_request(&req).unwrap();
        assert_eq!(
            parts,
            vec![("1-0-full", &b"abc"[..]), ("1-5-delta-0", &b""[..])]
        );
        let resp = encode_response(&[b"xy".to_vec(), vec![0; 9]]);
        assert_eq!(resp.len() as u64, response_bytes([2, 9].into_iter()));
        let parts = decode_response(&resp).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].len(), 9);
    }

    #[test]
    fn bad_bytes_are_refused_not_panicked_on() {
        let req = encode_request(&[("1-0-full", b"abc")]).unwrap();
        for cut in 0..req.len() {
            assert!(decode_request(&req[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = req.clone();
        long.push(0);
        assert_eq!(decode_request(&long), Err(MultiError::Trailing(1)));
        assert_eq!(decode_request(b"EPQ1\0\0"), Err(MultiError::Parts(0)));
        assert_eq!(decode_request(b"EPR1\x01\0"), Err(MultiError::Magic));
        let mut bad_id = req.clone();
        bad_id[7] = b'/';
        assert!(matches!(decode_request(&bad_id), Err(MultiError::Id(_))));
        // A length field pointing far past the end.
        let huge = [&b"EPR1\x01\0"[..], &u32::MAX.to_le_bytes()].concat();
        assert!(matches!(
            decode_response(&huge),
            Err(MultiError::Truncated(_))
        ));
        let many = [&b"EPQ1"[..], &(MAX_PARTS as u16 + 1).to_le_bytes()].concat();
        assert_eq!(decode_request(&many), Err(MultiError::Parts(MAX_PARTS + 1)));
    }

    #[test]
    fn requests_past_the_limits_are_errors_not_panics() {
        assert_eq!(encode_request(&[]), Err(MultiError::Parts(0)));
        let deep: Vec<(&str, &[u8])> = vec![("1-0-full", &b""[..]); MAX_PARTS + 1];
        assert_eq!(encode_request(&deep), Err(MultiError::Parts(MAX_PARTS + 1)));
        assert!(encode_request(&deep[..MAX_PARTS]).is_ok());
        for bad in ["", "1_0-full", "../x", &"1".repeat(MAX_ID_LEN + 1)] {
            assert!(
                matches!(encode_request(&[(bad, b"")]), Err(MultiError::Id(_))),
                "{bad}"
            );
        }
    }
}
