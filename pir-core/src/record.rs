//! Records: `tag || value` cut into plaintext elements of `bits` bits.

use crate::keys::TAG_BYTES;

/// Elements needed for a record of `value_bytes` bytes.
pub fn record_elems(value_bytes: usize, bits: u32) -> usize {
    ((TAG_BYTES + value_bytes) * 8).div_ceil(bits as usize)
}

/// Writes the elements of `tag || value` (each `< 2^bits`) into `out`.
pub fn encode_record(tag: u64, value: &[u8], bits: u32, out: &mut [u8]) {
    let mut packer = BitPacker::new(bits, out);
    for &b in tag.to_le_bytes().iter().chain(value) {
        packer.push_byte(b);
    }
    packer.finish();
}

/// Reassembles `(tag, value)` from elements (the inverse of [`encode_record`]).
pub fn decode_record(elems: &[u8], bits: u32, value_bytes: usize) -> (u64, Vec<u8>) {
    let mut bytes = Vec::with_capacity(TAG_BYTES + value_bytes);
    let mut acc: u32 = 0;
    let mut have = 0u32;
    let mask = (1u32 << bits) - 1;
    for &e in elems {
        acc |= (e as u32 & mask) << have;
        have += bits;
        while have >= 8 {
            bytes.push(acc as u8);
            acc >>= 8;
            have -= 8;
        }
        if bytes.len() >= TAG_BYTES + value_bytes {
            break;
        }
    }
    bytes.resize(TAG_BYTES + value_bytes, 0);
    let tag = u64::from_le_bytes(bytes[..TAG_BYTES].try_into().unwrap());
    (tag, bytes.split_off(TAG_BYTES))
}

struct BitPacker<'a> {
    bits: u32,
    out: &'a mut [u8],
    pos: usize,
    acc: u32,
    have: u32,
}

impl<'a> BitPacker<'a> {
    fn new(bits: u32, out: &'a mut [u8]) -> Self {
        BitPacker {
            bits,
            out,
            pos: 0,
            acc: 0,
            have: 0,
        }
    }

    fn push_byte(&mut self, b: u8) {
        self.acc |= (b as u32) << self.have;
        self.have += 8;
        while self.have >= self.bits {
            self.out[self.pos] = (self.acc & ((1 << self.bits) - 1)) as u8;
            self.pos += 1;
            self.acc >>= self.bits;
            self.have -= self.bits;
        }
    }

    fn finish(mut self) {
        if self.have > 0 {
            self.out[self.pos] = self.acc as u8;
            self.pos += 1;
        }
        self.out[self.pos..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn records_round_trip(tag: u64, value in proptest::collection::vec(any::<u8>(), 0..80), bits in 1u32..=8) {
            let mut elems = vec![0u8; record_elems(value.len(), bits)];
            encode_record(tag, &value, bits, &mut elems);
            prop_assert!(elems.iter().all(|&e| (e as u32) < (1 << bits)));
            prop_assert_eq!(decode_record(&elems, bits, value.len()), (tag, value));
        }
    }
}
