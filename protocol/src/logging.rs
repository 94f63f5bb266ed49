//! Logging set-up shared by every program: a `tracing` filter (`--log`,
//! `ETHPIR_LOG`) and structured lines on stderr, so stdout stays free for
//! what a command prints.

/// A log filter that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("--log: {0}")]
pub struct LogFilterError(String);

/// Installs the global subscriber with `filter`: a level (`info`), and
/// per-module levels (`proxy=debug,hyper=off,info`). Targets and levels
/// only: `tracing-subscriber`'s span and field filters would bring a
/// regex engine into every program's build for a feature nobody used.
pub fn init(filter: &str) -> Result<(), LogFilterError> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter: tracing_subscriber::filter::Targets =
        filter.parse().map_err(|e| LogFilterError(format!("{e}")))?;
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(filter)
        .init();
    Ok(())
}
