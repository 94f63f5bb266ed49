//! Test hooks at the phases of a build, so that crash tests can kill a
//! build at a known point. `ETHPIR_PAUSE_AT=<phase>` prints
//! `ethpir: paused at <phase>` on stderr and sleeps; `ETHPIR_ABORT_AT=<phase>`
//! aborts the process there. Phases: export, encode, hint, write, publish.

pub fn hit(phase: &str) {
    if std::env::var("ETHPIR_ABORT_AT").is_ok_and(|p| p == phase) {
        eprintln!("ethpir: aborting at {phase}");
        std::process::abort();
    }
    if std::env::var("ETHPIR_PAUSE_AT").is_ok_and(|p| p == phase) {
        eprintln!("ethpir: paused at {phase}");
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
