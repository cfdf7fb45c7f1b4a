//! `tool` steps: call a tool on an upstream MCP server (2026-07-28, Streamable HTTP) and follow
//! the upstream task it may create.
//!
//! One attempt is one of:
//! - a fresh `tools/call` (or the MRTR retry carrying answers and the upstream `requestState`):
//!   a result ends the attempt, an `input_required` result surfaces as this Run's input, and a
//!   `CreateTaskResult` is reported as a checkpoint at once, so the upstream task id is in status
//!   before anything else happens;
//! - following a recorded upstream task: forward answers with `tasks/update` first, then poll
//!   `tasks/get` at the upstream's `pollIntervalMs` until it ends or asks for input.
//!
//! The attempt deadline bounds all of it. When the Run is cancelled (or deleted) mid-attempt,
//! an in-flight blocking call is dropped (the upstream sees the request cancelled) and a known
//! upstream task gets a best-effort `tasks/cancel`.

mod executor;
mod keyed;
mod outcomes;
mod upstream;

pub(crate) use executor::ToolExecutor;
