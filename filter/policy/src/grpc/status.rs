//! gRPC's status codes (grpc/doc/statuscodes.md), as a gRPC health check ends with them: by
//! number, and by the name gRPC writes, which the log and the status page say.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A gRPC status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

/// Every code, by its number.
const CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

impl Code {
    /// The code numbered `n`; a number gRPC does not define is `UNKNOWN`, as gRPC's own
    /// libraries take it.
    pub fn of(n: u32) -> Code {
        usize::try_from(n)
            .ok()
            .and_then(|n| CODES.get(n))
            .copied()
            .unwrap_or(Code::Unknown)
    }

    /// Its name as gRPC writes it (`UNAVAILABLE`): what the log and the status page say.
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_its_number_and_an_undefined_number_is_unknown() {
        for (n, code) in CODES.iter().enumerate() {
            assert_eq!(Code::of(n as u32), *code);
        }
        assert_eq!(Code::of(17), Code::Unknown);
        assert_eq!(Code::of(u32::MAX), Code::Unknown);
        assert_eq!(Code::Unavailable.name(), "UNAVAILABLE");
    }
}
