//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod contract;
pub mod cut;
pub mod fakeapi;
pub mod harness;
pub mod hooked;
pub mod mcp;
pub mod otlp;
pub mod postgres;
pub mod process;
pub mod sink;
pub mod upstream;
