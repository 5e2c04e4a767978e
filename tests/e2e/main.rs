//! End-to-end tests: real `.wasm` plugins and guests, the real runtime and
//! the real `custodian` binary.

mod cli;
mod limits;
mod loading;
mod retention_table;
mod support;
