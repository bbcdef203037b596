//! What the suites' tests share: a host on the real module, durations, and results that must be
//! `Ok`.

use std::time::Duration;
use upcheck_host_tests::{Host, HostError, HostOptions, UPCHECK_WASM};

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A host on the built upcheck.wasm with the default options (a main-thread VM and two
/// workers, Envoy's profile).
pub fn host() -> Host {
    Host::from_file(UPCHECK_WASM, HostOptions::default())
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"))
}

/// `result`'s value; the test fails with its error otherwise.
pub fn ok<T>(result: Result<T, HostError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}
