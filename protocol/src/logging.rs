//! Logging set-up shared by every program: a `tracing` filter (`--log`,
//! `ETHPIR_LOG`) and structured lines on stderr, so stdout stays free for
//! what a command prints.

/// A log filter that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("--log: {0}")]
pub struct LogFilterError(String);

/// Installs the global subscriber with `filter` (e.g. `info`,
/// `proxy=debug,info`).
pub fn init(filter: &str) -> Result<(), LogFilterError> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| LogFilterError(e.to_string()))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    Ok(())
}
