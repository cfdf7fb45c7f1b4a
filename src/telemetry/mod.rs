//! What Runway tells about itself: metrics (Prometheus) and traces (OpenTelemetry).

mod metrics;
mod run_span;
mod traces;

pub use metrics::*;
pub use traces::*;
