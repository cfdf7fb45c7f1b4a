//! The MCP endpoint (protocol 2026-07-28, stateless Streamable HTTP). rmcp does the protocol;
//! this module routes tenants, authenticates in front of it, and maps Workflows to tools and
//! Runs to tasks. rmcp types do not leave this module.
//!
//! Leaves (`config`, `errors`, `caps`, `headers`, `projection`, `recent`) import nothing of the
//! folder but each other; `state` and `caller` hold what a request carries; `handler` defines
//! the per-request `RunwayMcp`, whose methods live beside what they serve (`tools`, `tasks`,
//! `answers`, `builtin`, `sealing`); `gate` and `fast` sit on top. Nothing imports upwards
//! (tests/integration/layering.rs).

mod access;
mod answers;
mod apps;
mod archived;
mod builtin;
mod caller;
mod calls;
mod caps;
mod catalog;
mod config;
mod console;
mod cursor;
mod delivery;
mod era2025;
mod errors;
mod fast;
mod filters;
mod gate;
mod handler;
mod headers;
mod listen;
mod message;
mod own_tools;
mod pausing;
mod projection;
mod recent;
mod rendered;
mod retrying;
mod sealing;
mod shares;
mod state;
mod tasks;
mod tools;
mod views;

pub use config::{Config, MAX_BODY_BYTES, StateKeyError, TaskAccess, parse_state_keys};
pub(crate) use gate::router;
pub use state::{McpState, StateError, Tenant};
