//! What machine a figure came from: CPU model, the SIMD flags the kernels
//! care about, the last-level cache, and the memory read bandwidth measured
//! in the same run (the ceiling a database scan can reach).

use std::time::Instant;

use rayon::prelude::*;
use serde_json::{json, Value};

/// The CPU model as the kernel reports it.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The SIMD features the kernels choose between, as detected at run time.
pub fn simd_flags() -> Vec<&'static str> {
    let mut flags = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if is_x86_feature_detected!($f) {
                    flags.push($f);
                }
            )*};
        }
        probe!(
            "sse4.1",
            "avx2",
            "avx512f",
            "avx512bw",
            "avx512vnni",
            "avxvnni"
        );
    }
    flags
}

/// Size of the last-level cache in bytes, when sysfs tells it.
pub fn llc_bytes() -> Option<u64> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    (0..8)
        .filter_map(|i| std::fs::read_to_string(dir.join(format!("index{i}/size"))).ok())
        .filter_map(|s| parse_cache_size(s.trim()))
        .max()
}

fn parse_cache_size(s: &str) -> Option<u64> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "K" => n << 10,
        "M" => n << 20,
        "G" => n << 30,
        _ => n,
    })
}

/// Sums a slice with independent lanes so the compiler emits wide loads;
/// the sum is returned so the reads cannot be optimised away.
fn read_all(buf: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    for chunk in buf.chunks_exact(8) {
        for (l, &x) in lanes.iter_mut().zip(chunk) {
            *l = l.wrapping_add(x);
        }
    }
    lanes.iter().fold(0, |a, &b| a.wrapping_add(b))
}

/// Memory read bandwidth in GB/s on one core and on all of rayon's threads:
/// the best of `reps` plain vectorised reads of a buffer four times the
/// last-level cache (at least 1 GiB, at most 4 GiB).
pub fn memread_gbps(reps: usize) -> Value {
    let bytes = llc_bytes()
        .unwrap_or(64 << 20)
        .saturating_mul(4)
        .clamp(1 << 30, 4 << 30);
    let words = (bytes / 8) as usize;
    // Touch every page first (and make the contents non-trivial).
    let buf: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let threads = rayon::current_num_threads();
    let mut one = 0.0f64;
    let mut all = 0.0f64;
    let mut sink = 0u64;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        sink ^= read_all(&buf);
        one = one.max(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        let per = words.div_ceil(threads).next_multiple_of(8);
        sink ^= buf
            .par_chunks(per)
            .map(read_all)
            .reduce(|| 0, |a, b| a.wrapping_add(b));
        all = all.max(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    std::hint::black_box(sink);
    json!({
        "memread_buffer_bytes": bytes,
        "memread_gbps_per_core": one,
        "memread_gbps_all_cores": all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("480M"), Some(480 << 20));
        assert_eq!(parse_cache_size("12"), Some(12));
        assert_eq!(parse_cache_size("x"), None);
    }
}
