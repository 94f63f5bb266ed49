//! The PIR HTTP server (axum). Filled by the server/proxy issue.
