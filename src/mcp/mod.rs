//! The MCP endpoint.

pub mod codes;
