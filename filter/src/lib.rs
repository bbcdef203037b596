//! upcheck.wasm
