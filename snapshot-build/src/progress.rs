//! Progress of long steps, reported through a callback: the library says
//! what happens, the binary decides how to show it (bars on a terminal,
//! nothing in a service or a test).

use std::sync::Arc;

/// A long step of a build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Reading accounts from a node.
    ExportAccounts,
    /// Building the binary fuse filters.
    EncodeFilters,
    /// The hint, counted in rows of the public matrix.
    BuildHint,
}

impl Step {
    /// What a progress display calls the step.
    pub fn label(self) -> &'static str {
        match self {
            Step::ExportAccounts => "accounts",
            Step::EncodeFilters => "encoding binary fuse filters",
            Step::BuildHint => "hint rows of A",
        }
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressEvent {
    /// A step began; `total` units when known.
    Begin { step: Step, total: Option<u64> },
    /// `by` more units of the step are done.
    Advance { step: Step, by: u64 },
    /// The step ended.
    End { step: Step },
}

/// Receives progress events (from any thread).
pub type ProgressFn = Arc<dyn Fn(ProgressEvent) + Send + Sync>;

/// Sends events to an optional receiver.
pub fn report(progress: &Option<ProgressFn>, event: ProgressEvent) {
    if let Some(f) = progress {
        f(event);
    }
}
