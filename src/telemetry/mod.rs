//! What Runway tells about itself: metrics (Prometheus) and traces (OpenTelemetry).

mod metrics;
mod traces;

pub use metrics::*;
pub use traces::*;
