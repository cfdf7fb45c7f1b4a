//! Runway: Workflows as MCP tools, Runs as durable MCP tasks.

pub mod api;
pub mod engine;
pub mod mcp;
pub mod store;
