//! Ethereum state export, snapshot store and scheduled builds. Filled by the snapshotter issue.
