//! Exit codes of the client commands.

/// The call succeeded.
pub const OK: u8 = 0;
/// The tool reported an error, the task failed or was cancelled.
pub(crate) const FAILED: u8 = 1;
/// Bad usage, or the server could not be reached or refused the request.
pub const ERROR: u8 = 2;
/// An answer was not taken: its question is not open (unknown key, answered already, the
/// task ended) or the server refused it (the reason is printed).
pub(crate) const NOT_TAKEN: u8 = 3;
/// Interrupted (Ctrl-C).
pub const INTERRUPTED: u8 = 130;
