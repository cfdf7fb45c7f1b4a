//! Validation of a Workflow beyond its schema: the CRD's CEL rules, JSON Schemas, templates,
//! durations and what the current store supports. Used wherever Workflows are loaded.

mod fields;
mod steps;
mod workflow;

pub use fields::{Capabilities, Invalid};
pub(crate) use workflow::readiness;
pub use workflow::{spec, workflow};
