//! JSON-RPC error codes Runway answers with, in one place.

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist (or was removed in 2026-07-28).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters; also unknown, foreign and purged tasks.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error; also run-time template and rendering failures of a Run.
pub const INTERNAL_ERROR: i64 = -32603;
/// A header does not match the body, or a required header is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// The client did not declare a capability the request needs.
pub const MISSING_CAPABILITY: i64 = -32021;
/// The protocol version is not supported.
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// Missing or invalid credentials (sent with HTTP 401).
pub const UNAUTHENTICATED: i64 = -32001;
/// 2025 era: the resource asked for does not exist (2026-07-28 answers `INVALID_PARAMS`).
pub const RESOURCE_NOT_FOUND_2025: i64 = -32002;
/// The caller may not do this (authorization failure on a JSON-RPC request).
pub const FORBIDDEN: i64 = -32003;

/// Whether `code` lies in the range JSON-RPC and MCP keep for the protocol (-32768 to -32000)
/// with a meaning no tool's failure has: `-32601` is even answered as HTTP 404 ("method not
/// found") and `-32020` to `-32022` as HTTP 400. Invalid parameters and internal error are the
/// two of the range a failed call can honestly report.
pub fn reserved_for_protocol(code: i64) -> bool {
    (-32768..=-32000).contains(&code) && code != INVALID_PARAMS && code != INTERNAL_ERROR
}

/// The code a Run ends with for a JSON-RPC error `code` it was handed (an upstream's): one
/// [`reserved_for_protocol`] becomes an internal error (the original stays in the error's
/// `data`), any other passes as it is.
pub fn for_run(code: i64) -> i64 {
    if reserved_for_protocol(code) {
        INTERNAL_ERROR
    } else {
        code
    }
}
