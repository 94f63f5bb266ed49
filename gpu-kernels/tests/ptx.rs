//! The CUDA kernels compiled for real architectures on every machine, no
//! GPU needed: `kernels/ethpir.cu` through NVRTC (the same call and the
//! same defines as on a GPU) for compute_80 and compute_90, then
//! assembled by ptxas for sm_80 and sm_90. Fails on a compile error, a
//! register spill, or more registers per thread than a kernel's launch
//! bounds leave (65,536 per block, at most 255 per thread).
//!
//! NVRTC and ptxas come from NVIDIA's PyPI wheels, which
//! `scripts/install-test-deps.sh` puts in `.tools/cuda` (or name another
//! folder with `ETHPIR_CUDA_TOOLS`). NVRTC is loaded by name, so the
//! compiling half runs in a child process with the wheel's library folder
//! on `LD_LIBRARY_PATH`.
#![cfg(feature = "cuda")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use gpu_kernels::defines::{EXPAND_THREADS, SLICE_THREADS};

const ARCHS: [(&str, &str); 2] = [("compute_80", "sm_80"), ("compute_90", "sm_90")];
const OUT_ENV: &str = "ETHPIR_PTX_OUT";

/// The kernels and the threads per block their launch bounds name.
const KERNELS: [(&str, u32); 3] = [
    ("ethpir_expand_turboshake", EXPAND_THREADS),
    ("ethpir_expand_aes", EXPAND_THREADS),
    ("ethpir_answer_slice", SLICE_THREADS),
];

/// Every kernel ptxas must report on: the above and the answer kernels.
fn kernels() -> Vec<(String, u32)> {
    KERNELS
        .iter()
        .map(|(k, t)| (k.to_string(), *t))
        .chain(
            gpu_kernels::answer::AnswerKernel::ALL
                .iter()
                .map(|k| (k.name(), k.threads())),
        )
        .collect()
}

fn tools() -> PathBuf {
    let dir = std::env::var_os("ETHPIR_CUDA_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/cuda/nvidia/cu13")
        });
    assert!(
        dir.join("bin/ptxas").is_file() && dir.join("lib").is_dir(),
        "no NVRTC and ptxas in {}: run scripts/install-test-deps.sh",
        dir.display()
    );
    dir
}

/// What ptxas said of one kernel.
#[derive(Debug, Default)]
struct Usage {
    registers: u32,
    spill_stores: u32,
    spill_loads: u32,
}

/// Parses `ptxas -v`: per entry function, its registers and spills.
fn parse_ptxas(report: &str) -> BTreeMap<String, Usage> {
    let mut out: BTreeMap<String, Usage> = BTreeMap::new();
    let mut current = None;
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let head = &line[..line.find(what)?];
        head.split_whitespace().last()?.parse().ok()
    };
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.entry(name.clone()).or_default();
            current = Some(name);
        }
        let Some(usage) = current.as_ref().and_then(|n| out.get_mut(n)) else {
            continue;
        };
        if let Some(n) = number_before(line, "bytes spill stores") {
            usage.spill_stores = n;
        }
        if let Some(n) = number_before(line, "bytes spill loads") {
            usage.spill_loads = n;
        }
        if let Some(n) = line
            .split("Used ")
            .nth(1)
            .and_then(|r| number_before(r, "registers"))
        {
            usage.registers = n;
        }
    }
    out
}

#[test]
fn the_kernels_compile_for_sm80_and_sm90_without_spills() {
    let tools = tools();
    let out = tempfile_dir();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "compile_in_a_process_of_its_own", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", tools.join("lib"))
        .env(OUT_ENV, &out)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "NVRTC:\n{}{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    for (_, sm) in ARCHS {
        let ptx = out.join(format!("{sm}.ptx"));
        let report = Command::new(tools.join("bin/ptxas"))
            .arg(format!("-arch={sm}"))
            .arg("-v")
            .arg(&ptx)
            .arg("-o")
            .arg(out.join(format!("{sm}.cubin")))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&report.stderr).to_string();
        assert!(report.status.success(), "ptxas {sm}:\n{text}");
        let usage = parse_ptxas(&text);
        for (kernel, threads) in kernels() {
            let u = usage
                .get(&kernel)
                .unwrap_or_else(|| panic!("{sm}: no {kernel} in\n{text}"));
            let allowed = (65536 / threads).min(255);
            assert_eq!(
                (u.spill_stores, u.spill_loads),
                (0, 0),
                "{sm} {kernel} spills:\n{text}"
            );
            assert!(
                u.registers > 0 && u.registers <= allowed,
                "{sm} {kernel}: {u:?}, at most {allowed}"
            );
            eprintln!("{sm} {kernel}: {} registers, no spills", u.registers);
        }
    }
    std::fs::remove_dir_all(&out).ok();
}

/// The compiling half (run by the test above with NVRTC on the library
/// path; does nothing when run on its own).
#[test]
#[ignore = "run by the_kernels_compile_for_sm80_and_sm90_without_spills"]
fn compile_in_a_process_of_its_own() {
    let Some(out) = std::env::var_os(OUT_ENV).map(PathBuf::from) else {
        return;
    };
    for (compute, sm) in ARCHS {
        let ptx = gpu_kernels::cuda::compile_ptx(Some(compute))
            .unwrap_or_else(|e| panic!("{compute}: {e}"));
        std::fs::write(out.join(format!("{sm}.ptx")), ptx.to_src()).unwrap();
    }
}

/// A fresh folder in the system temp directory, one per test process.
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ethpir-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn ptxas_reports_parse() {
    let report = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'ethpir_expand' for 'sm_90'\n\
ptxas info    : Function properties for ethpir_expand\n\
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 78 registers, used 0 barriers, 360 bytes cmem[0]\n";
    let usage = parse_ptxas(report);
    let u = &usage["ethpir_expand"];
    assert_eq!((u.registers, u.spill_stores, u.spill_loads), (78, 4, 12));
}
