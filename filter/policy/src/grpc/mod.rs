//! gRPC backends in the policy's own terms: a gRPC server's health is what it says through the
//! standard Health Checking Protocol ([`health`]), not a `GET` of a path, and a call that fails
//! ends with one of gRPC's status codes ([`status`]), which the log and the status page name; a
//! real call's code is judged as the HTTP status gRPC gives it ([`call`]); its `Watch` pushes
//! that health as it changes ([`watch`]).

pub mod call;
pub mod health;
pub mod status;
pub mod watch;
