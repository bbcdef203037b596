//! The proxy-wasm ABI 0.2.1's numbers, as upcheck uses them: the statuses hosts answer, the
//! maps, buffers, log levels and metric kinds calls name, and what a stream callback answers.
//!
//! They are the ABI's own values (proxy-wasm's `spec/abi-versions/v0.2.1`), defined here because
//! the module implements the ABI itself ([`crate::callbacks`], [`crate::hostcall`]) rather than
//! through the Rust SDK, whose crate brings its own exports with it.

/// Bytes the host handed over.
pub type Bytes = Vec<u8>;

/// What a host call answered when it did not answer `Ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 1: the key, property, queue or call does not exist.
    NotFound,
    /// 2: an argument the host could not take.
    BadArgument,
    /// 3: a value the host could not serialize.
    SerializationFailure,
    /// 4: a value the host could not parse.
    ParseFailure,
    /// 7: nothing to read.
    Empty,
    /// 8: the shared-data value changed since its compare-and-swap number was read.
    CasMismatch,
    /// 10, or any number the ABI does not name: the host failed.
    InternalFailure,
}

impl Status {
    /// A host call's answer: `Ok(())` for 0, else the status it names.
    pub fn of(raw: u32) -> Result<(), Status> {
        Err(match raw {
            0 => return Ok(()),
            1 => Status::NotFound,
            2 => Status::BadArgument,
            3 => Status::SerializationFailure,
            4 => Status::ParseFailure,
            7 => Status::Empty,
            8 => Status::CasMismatch,
            _ => Status::InternalFailure,
        })
    }
}

/// The header map a call reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderMap {
    /// The request's headers.
    Request = 0,
    /// The response's headers.
    Response = 2,
    /// The response's trailers.
    ResponseTrailers = 3,
    /// The headers of an answer to `dispatch_http_call`.
    CallResponse = 6,
}

/// A buffer a call reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferType {
    /// The body of an answer to `dispatch_http_call`.
    HttpCallResponseBody = 4,
    /// A message received on a gRPC stream.
    GrpcReceiveBuffer = 5,
    /// The plugin's configuration.
    PluginConfiguration = 7,
}

/// A log line's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLogLevel {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Critical = 5,
}

/// A metric's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
}

/// What a stream callback tells the host to do with the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Action {
    /// Go on to the next filter.
    Continue = 0,
    /// Hold the stream until the module resumes it (or answers it).
    Pause = 1,
}
