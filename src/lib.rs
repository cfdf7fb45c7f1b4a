//! Runway: Workflows as MCP tools, Runs as durable MCP tasks.

#![forbid(unsafe_code)]

/// This build's version (`version` in Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit this build comes from (`unknown` when it was built outside a checkout).
pub const COMMIT: &str = env!("RUNWAY_COMMIT");

pub mod api;
pub mod controller;
pub mod dial;
pub mod endpoint;
pub mod engine;
pub mod mcp;
pub mod protocol;
pub mod steps;
pub mod store;

/// Install the process-wide TLS crypto provider (ring). Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
pub mod auth;
pub mod client;
pub mod operator;
pub mod server;
pub mod telemetry;
