//! Every integration test in one binary: one link instead of one per file (linking the whole
//! crate into each binary was most of a fresh CI run). Each file of this folder is a module;
//! `cargo test --test integration <module>::` runs one of them. The e2e tier is its own
//! binary (`tests/e2e`), behind the `e2e` feature.

#[path = "../support/mod.rs"]
mod support;

mod archiving;
mod child_runs;
mod cli;
mod concurrency;
mod console_tools;
mod controller;
mod crash;
mod crash_retry;
mod crd_cel;
mod examples;
mod first_decision;
mod hostile;
mod http_steps;
mod kube_wiring;
mod layering;
mod manifests;
mod mcp_endpoint;
mod mcp_tasks;
mod notifying;
mod pausing;
mod properties;
mod readme;
mod retrying;
mod run_views;
mod scheduler;
mod schedules;
mod store_kube;
mod store_sqlite;
mod tool_steps;
mod traces;
mod watch_failures;
mod workflow_language;
