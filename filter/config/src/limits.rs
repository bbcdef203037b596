//! The limits: how much one document may make every worker hold (upstreams, names, headers,
//! statuses, a probe's body) and what a probe's timing may be. A module of its own so that every
//! bound is stated in one place, beside the others, for the grammars and `validate` to hold a
//! document to.

use std::time::Duration;

/// The largest `weight`.
pub const MAX_WEIGHT: u32 = 1000;
/// The largest `max_fails`: each remembered failure is kept, so memory stays bounded.
pub const MAX_FAILS_LIMIT: u32 = 1000;
/// The largest `passes` / `fails`.
pub const MAX_STREAK: u32 = 1000;
/// The most upstreams one configuration may list: each is probed, and kept on every worker.
pub const MAX_UPSTREAMS: usize = 10_000;
/// The longest upstream name, cluster, probe header name or `route_header`, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// The longest `upstreams[].note`, in bytes: room for what `upcheck backends` writes (a reason
/// of 200 characters, who of 64, what and when).
pub const MAX_NOTE_LEN: usize = 512;
/// The longest `pool` name, in bytes.
pub const MAX_POOL_LEN: usize = 64;
/// The longest probe header value, probe path, `status_path` or authority, in bytes.
pub const MAX_VALUE_LEN: usize = 4096;
/// The most probe headers; each value of a header given a list counts once.
pub const MAX_PROBE_HEADERS: usize = 64;
/// The largest `max_size`, 16 MiB: that much of a probe's body may be buffered.
pub const MAX_PROBE_BODY: u32 = 16 * 1024 * 1024;
/// The longest `expect_body`, in bytes.
pub const MAX_EXPECT_BODY_LEN: usize = 4096;
/// The most entries in `unhealthy_status`: every answer is compared with each.
pub const MAX_UNHEALTHY_STATUSES: usize = 100;
/// The shortest probe `interval` and `timeout`: Envoy takes the timeout in whole milliseconds,
/// and 0 would mean none.
pub const MIN_PROBE_DURATION: Duration = Duration::from_millis(1);
/// The longest probe `interval` and `timeout`: Envoy takes the timeout as 32-bit milliseconds
/// (about 49.7 days).
pub const MAX_PROBE_DURATION: Duration = Duration::from_millis(4_294_967_295);
