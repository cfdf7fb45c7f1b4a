//! The 2025 era beside 2026-07-28 on the same paths: clients that open with `initialize`
//! (revisions 2025-11-25, 2025-06-18, 2025-03-26) are served here, in front of rmcp, without
//! server-side sessions: what spans requests travels sealed in `Mcp-Session-Id`, and the
//! questions a held call asks carry sealed ids, so any replica serves any request.
//!
//! `session` and `wire` are leaves; `tasks` and `held` serve the methods `serve` dispatches;
//! `fast` answers the hot `tasks/get` before the general path reads the message, with the
//! sessions `opened` keeps per thread; `batch` serves the arrays of revision 2025-03-26 one
//! message at a time through `serve`.

mod batch;
mod fast;
mod held;
mod opened;
mod serve;
mod session;
mod tasks;
mod wire;

pub(crate) use batch::serve_batch;
pub(crate) use fast::get_task as fast_get_task;
pub(crate) use serve::{Caller, recognise, serve};
