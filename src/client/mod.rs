//! The `runway call`, `runway tasks …` and `runway check` client commands: an MCP 2026-07-28 client (rmcp) that
//! works against any server, with a terminal prompt for input requests.

mod archived;
mod call;
mod check;
mod errors;
pub mod exit;
mod list;
mod outage;
mod output;
mod pause;
mod prompt;
mod target;
mod tasks;

pub use archived::get_archived;
pub use call::{arguments, call};
pub use check::check;
pub use errors::ClientError;
pub use list::{ListFilters, list};
pub use pause::{pause, retry};
pub use prompt::Prompter;
pub use target::Target;
pub use tasks::{answer, cancel, get, watch};
