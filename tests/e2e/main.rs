//! End-to-end tests: real `.wasm` plugins and guests, the real runtime and
//! the real `custodian` binary.

mod access;
mod archive;
mod bounds;
mod cli;
mod contract;
mod crc64;
mod denial;
mod dvc_history;
mod invalidation;
mod limits;
mod loading;
mod object_cli;
mod plugin_rollout;
mod plugin_table;
mod purge;
mod purge_policy;
mod repo;
mod retention_table;
mod rollback;
mod runaway;
mod s3;
mod s3_dvc;
mod s3_rust_sdk;
mod scale_out;
mod serve;
mod server;
mod signed_plugins;
mod support;
mod takedown;
mod takedown_crash;
mod takedown_progress;
mod tick;
mod tick_crash;
mod versions;
