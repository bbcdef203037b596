//! What Envoy 1.40 itself contributes to an exchange, so the filter sees what it would see in
//! production: the answers Envoy makes up when an upstream fails, the response flags and code
//! details of a request, and the properties `proxy_get_property` reads.
//!
//! Sources: DESIGN.md "Facts about Envoy 1.40 measured here" (Envoy-made 503/504 carry only
//! `:status`, `content-length`, `content-type`); Envoy `stream_info.h` `ResponseFlag` (bit values
//! below); Envoy's router (`upstream request timeout` body, `upstream_response_timeout` details,
//! `cluster_not_found` with the default `cluster_not_found_response_code` 503); the access-log
//! docs' `upstream_reset_before_response_started{connection_failure,...}` example; the wasm
//! filter's `failStream` (503 `wasm_fail_stream`); and the CEL attribute docs for encodings
//! (integers as 8 little-endian bytes, strings as raw bytes).

use crate::abi::{self, Headers};
use crate::upstream::Behaviour;
use std::time::Duration;

/// Response flag UT: upstream request timeout (`UpstreamRequestTimeout = 0x4`).
pub const UT: u64 = 0x4;
/// Response flag UF: upstream connection failure (`UpstreamConnectionFailure = 0x20`).
pub const UF: u64 = 0x20;
/// Response flag UO: upstream overflow, the circuit breaker full (`UpstreamOverflow = 0x80`).
pub const UO: u64 = 0x80;
/// Response flag DC: downstream connection termination (`DownstreamConnectionTermination = 0x4000`).
pub const DC: u64 = 0x4000;
/// Response flag NC: no cluster found (`NoClusterFound = 0x1000000`).
pub const NC: u64 = 0x100_0000;

/// Name, root id and vm id of the plugin, as in `config/envoy-simple.yaml`.
pub(crate) const PLUGIN: &str = "upcheck";

/// An HTTP answer as it reaches the filter, with the stream info Envoy records for it.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Headers,
    pub body: Vec<u8>,
    pub flags: u64,
    pub details: String,
    /// Why a dispatch came back without an answer, as ngx_wasm_module's `:dispatch_status`
    /// says ([`crate::nginx`]); Envoy has no such header.
    pub dispatch_status: Option<&'static str>,
}

impl Reply {
    fn new(status: u16, body: &str, extra: Headers, flags: u64, details: &str) -> Reply {
        let mut headers = vec![
            (":status".to_string(), status.to_string()),
            ("content-length".to_string(), body.len().to_string()),
        ];
        if !body.is_empty() {
            headers.push(("content-type".to_string(), "text/plain".to_string()));
        }
        headers.extend(extra);
        Reply {
            status,
            headers,
            body: body.as_bytes().to_vec(),
            flags,
            details: details.to_string(),
            dispatch_status: None,
        }
    }

    /// The backend's own answer: its status and body plus the headers a real app server sends.
    pub(crate) fn backend(status: u16, body: &str, server: &str, wall_nanos: u64) -> Reply {
        let extra = vec![
            ("date".to_string(), http_date(wall_nanos)),
            ("server".to_string(), server.to_string()),
        ];
        let mut reply = Reply::new(status, body, extra, 0, "via_upstream");
        if body.is_empty() {
            // A backend always names its content type, even for an empty body.
            reply
                .headers
                .insert(2, ("content-type".to_string(), "text/plain".to_string()));
        }
        reply
    }

    /// A real server's answer ([`crate::loopback`]), headers as read (`:status` first).
    pub(crate) fn upstream(status: u16, headers: Headers, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers,
            body,
            flags: 0,
            details: "via_upstream".to_string(),
            dispatch_status: None,
        }
    }

    /// Envoy's answer when the upstream's answer was not HTTP it could read.
    pub(crate) fn protocol_error() -> Reply {
        Reply::new(
            503,
            "upstream connect error or disconnect/reset before headers. reset reason: protocol \
             error",
            Vec::new(),
            0,
            "upstream_reset_before_response_started{protocol_error}",
        )
    }

    /// Envoy's answer when the upstream refused the connection.
    pub(crate) fn connection_failure() -> Reply {
        Reply::new(
            503,
            "upstream connect error or disconnect/reset before headers. reset reason: connection \
             failure, transport failure reason: delayed connect error: 111",
            Vec::new(),
            UF,
            "upstream_reset_before_response_started{connection_failure,delayed_connect_error:_111}",
        )
    }

    /// Envoy's answer when the upstream cluster's circuit breaker is full: the request is never
    /// sent.
    pub(crate) fn overflow() -> Reply {
        Reply::new(
            503,
            "upstream connect error or disconnect/reset before headers. reset reason: overflow",
            Vec::new(),
            UO,
            "upstream_reset_before_response_started{overflow}",
        )
    }

    /// Envoy's answer when the upstream did not answer within the route or call timeout.
    pub(crate) fn timeout() -> Reply {
        Reply::new(
            504,
            "upstream request timeout",
            Vec::new(),
            UT,
            "upstream_response_timeout",
        )
    }

    /// Envoy's answer when the routing header is missing or names no cluster.
    pub(crate) fn cluster_not_found() -> Reply {
        Reply::new(503, "", Vec::new(), NC, "cluster_not_found")
    }

    /// A route's `direct_response` of `status`, as a listener that routes nowhere answers (the
    /// status page listener's 404).
    pub(crate) fn direct_response(status: u16) -> Reply {
        Reply::new(status, "", Vec::new(), 0, "direct_response")
    }

    /// Envoy's answer on a worker whose VM has crashed (`failure_policy: FAIL_CLOSED`).
    pub(crate) fn wasm_fail_stream() -> Reply {
        Reply::new(503, "", Vec::new(), 0, "wasm_fail_stream")
    }

    /// A response the filter made with `proxy_send_local_response`.
    pub(crate) fn local(status: u16, details: &str, body: &str, headers: Headers) -> Reply {
        Reply::new(status, body, headers, 0, details)
    }
}

/// When, after sending, and with what Envoy hands back the answer to a request sent to an upstream
/// behaving as `behaviour`, with `timeout` (none: wait for ever). `None` means never.
/// `server` names the backend in its `server` header; `wall_nanos` is the sending time.
pub(crate) fn exchange(
    behaviour: Behaviour,
    timeout: Option<Duration>,
    server: &str,
    wall_nanos: u64,
) -> Option<(Duration, Reply)> {
    match behaviour {
        Behaviour::Refuse => Some((Duration::ZERO, Reply::connection_failure())),
        Behaviour::Overflow => Some((Duration::ZERO, Reply::overflow())),
        _ => answer_in_time(&behaviour, timeout, server, wall_nanos)
            .or_else(|| timeout.map(|timeout| (timeout, Reply::timeout()))),
    }
}

/// The backend's own answer when one behaving as `behaviour` answers within `timeout`: when,
/// after sending at `wall_nanos`, it arrives, and what it is; whatever the proxy in front makes
/// of the rest is the caller's.
pub(crate) fn answer_in_time(
    behaviour: &Behaviour,
    timeout: Option<Duration>,
    server: &str,
    wall_nanos: u64,
) -> Option<(Duration, Reply)> {
    match behaviour {
        Behaviour::Answer {
            status,
            body,
            delay,
            headers,
        } if timeout.is_none_or(|timeout| *delay < timeout) => {
            let at = wall_nanos.saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(0));
            let mut reply = Reply::backend(*status, body, server, at);
            reply.headers.extend(headers.iter().cloned());
            Some((*delay, reply))
        }
        _ => None,
    }
}

/// What Envoy knows about one request, for `proxy_get_property`.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamInfo {
    pub source_address: String,
    pub destination_address: String,
    pub code: Option<u16>,
    pub flags: u64,
    pub details: String,
    /// Cluster and `127.0.0.1:port` address of the upstream the request was routed to.
    pub upstream: Option<(String, String)>,
}

/// The value of the property at `path` (NUL-separated segments already split), encoded as Envoy
/// encodes it, or `None` when Envoy would answer NotFound. `stream` is the effective HTTP
/// context's info and request headers, if the effective context is one.
pub(crate) fn property(path: &[&str], stream: Option<(&StreamInfo, &Headers)>) -> Option<Vec<u8>> {
    let string = |s: &str| Some(s.as_bytes().to_vec());
    let header = |name: &str| {
        let (_, headers) = stream?;
        string(abi::header(headers, name)?)
    };
    match path {
        ["plugin_name"] | ["plugin_root_id"] | ["plugin_vm_id"] => string(PLUGIN),
        ["request", "path"] => header(":path"),
        ["request", "url_path"] => {
            let path = String::from_utf8(header(":path")?).ok()?;
            string(path.split('?').next().unwrap_or_default())
        }
        ["request", "method"] => header(":method"),
        ["request", "host"] => header(":authority"),
        ["source", "address"] => string(&stream?.0.source_address),
        ["destination", "address"] => string(&stream?.0.destination_address),
        ["response", "code"] => Some(u64::from(stream?.0.code?).to_le_bytes().to_vec()),
        ["response", "flags"] => Some(stream?.0.flags.to_le_bytes().to_vec()),
        ["response", "code_details"] => string(&stream?.0.details),
        ["upstream", "address"] => string(&stream?.0.upstream.as_ref()?.1),
        ["xds", "cluster_name"] => string(&stream?.0.upstream.as_ref()?.0),
        _ => None,
    }
}

/// `wall_nanos` as an HTTP `date` header value (IMF-fixdate).
fn http_date(wall_nanos: u64) -> String {
    let secs = Duration::from_nanos(wall_nanos).as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm), here apart from the
    // core's: the host shares no code with the module it runs.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_header_of_the_epoch_is_an_imf_fixdate() {
        assert_eq!(
            http_date(crate::clock::EPOCH_NANOS),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );
    }

    #[test]
    fn response_flags_are_eight_little_endian_bytes() {
        let info = StreamInfo {
            flags: UF,
            ..StreamInfo::default()
        };
        let headers = Headers::new();
        assert_eq!(
            property(&["response", "flags"], Some((&info, &headers))),
            Some(vec![0x20, 0, 0, 0, 0, 0, 0, 0])
        );
        assert_eq!(
            property(&["response", "code"], Some((&info, &headers))),
            None
        );
    }
}
