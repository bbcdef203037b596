//! The numbers of the proxy-wasm ABI 0.2.1 that host and guest must agree on, and the wire format
//! of header maps. Kept in one place so every hostcall speaks the same dialect as the Rust SDK
//! 0.2.5 (`types.rs`, `hostcalls.rs`) and as Envoy's proxy-wasm host.

/// A hostcall's result as the guest sees it (`WasmResult` in proxy-wasm-cpp-host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// The call did what was asked.
    Ok = 0,
    /// No such key, header, property, queue or buffer.
    NotFound = 1,
    /// The arguments make no sense (unknown cluster, missing `:authority`, wrong context...).
    BadArgument = 2,
    /// A serialized map or path could not be parsed.
    SerializationFailure = 3,
    /// What should name something parses as nothing (Envoy: a gRPC stream to no cluster).
    ParseFailure = 4,
    /// A guest pointer/length pair points outside the guest's memory.
    InvalidMemoryAccess = 6,
    /// The shared queue is empty.
    Empty = 7,
    /// The shared-data value changed since the guest read it.
    CasMismatch = 8,
    /// The host could not do it (e.g. the guest's allocator returned null).
    InternalFailure = 10,
}

/// Log levels of `proxy_log`, as the SDK numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// 0
    Trace,
    /// 1
    Debug,
    /// 2
    Info,
    /// 3
    Warn,
    /// 4
    Error,
    /// 5
    Critical,
}

impl LogLevel {
    /// The level with ABI number `raw`, if there is one.
    pub fn from_raw(raw: i32) -> Option<LogLevel> {
        [
            LogLevel::Trace,
            LogLevel::Debug,
            LogLevel::Info,
            LogLevel::Warn,
            LogLevel::Error,
            LogLevel::Critical,
        ]
        .get(usize::try_from(raw).ok()?)
        .copied()
    }
}

/// Which header map a hostcall addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapType {
    RequestHeaders,
    ResponseHeaders,
    CallResponseHeaders,
    CallResponseTrailers,
    /// The initial metadata of a gRPC stream, while `proxy_on_grpc_receive_initial_metadata` runs.
    GrpcInitialMetadata,
    /// Its trailing metadata, while `proxy_on_grpc_receive_trailing_metadata` runs.
    GrpcTrailingMetadata,
    /// Request/response trailers: never present in this host.
    Absent,
}

impl MapType {
    pub(crate) fn from_raw(raw: i32) -> Option<MapType> {
        Some(match raw {
            0 => MapType::RequestHeaders,
            2 => MapType::ResponseHeaders,
            4 => MapType::GrpcInitialMetadata,
            5 => MapType::GrpcTrailingMetadata,
            6 => MapType::CallResponseHeaders,
            7 => MapType::CallResponseTrailers,
            1 | 3 => MapType::Absent,
            _ => return None,
        })
    }
}

/// Which buffer `proxy_get_buffer_bytes` / `proxy_set_buffer_bytes` addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BufferType {
    ResponseBody,
    CallResponseBody,
    /// A gRPC stream's message, while `proxy_on_grpc_receive` runs.
    GrpcReceive,
    VmConfiguration,
    PluginConfiguration,
    /// Request body, TCP data, foreign call data: never present in this host.
    Absent,
}

impl BufferType {
    pub(crate) fn from_raw(raw: i32) -> Option<BufferType> {
        Some(match raw {
            1 => BufferType::ResponseBody,
            4 => BufferType::CallResponseBody,
            5 => BufferType::GrpcReceive,
            6 => BufferType::VmConfiguration,
            7 => BufferType::PluginConfiguration,
            0 | 2 | 3 | 8 => BufferType::Absent,
            _ => return None,
        })
    }
}

/// `proxy_continue_stream` / `proxy_close_stream` targets.
pub(crate) const STREAM_HTTP_REQUEST: i32 = 0;
pub(crate) const STREAM_HTTP_RESPONSE: i32 = 1;

/// `Action` returned by the HTTP callbacks.
pub(crate) const ACTION_CONTINUE: i32 = 0;
pub(crate) const ACTION_PAUSE: i32 = 1;

/// Metric kinds of `proxy_define_metric`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up; Envoy sums every VM's increments into one stat.
    Counter,
    /// Set or moved by any VM; the last writer wins.
    Gauge,
    /// A distribution of recorded values.
    Histogram,
}

impl MetricKind {
    pub(crate) fn from_raw(raw: i32) -> Option<MetricKind> {
        Some(match raw {
            0 => MetricKind::Counter,
            1 => MetricKind::Gauge,
            2 => MetricKind::Histogram,
            _ => return None,
        })
    }
}

/// A header map: lower-case names in order, values as the guest wrote them.
pub type Headers = Vec<(String, String)>;

/// The value of the first header named `name` in `headers`.
pub(crate) fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    let found = headers.iter().find(|(n, _)| n == name);
    found.map(|(_, value)| value.as_str())
}

/// Serializes `pairs` the way the SDK's `deserialize_map` reads them: a u32 count, then a (name
/// length, value length) u32 pair per entry, then every name and value NUL-terminated.
pub(crate) fn serialize_map(pairs: &[(String, String)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&len32(pairs.len()).to_le_bytes());
    for (name, value) in pairs {
        bytes.extend_from_slice(&len32(name.len()).to_le_bytes());
        bytes.extend_from_slice(&len32(value.len()).to_le_bytes());
    }
    for (name, value) in pairs {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
    }
    bytes
}

/// Parses a map the guest serialized; `None` when the sizes do not add up.
pub(crate) fn deserialize_map(bytes: &[u8]) -> Option<Headers> {
    let word = |at: usize| -> Option<usize> {
        let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(raw)).ok()
    };
    let count = word(0)?;
    let mut data = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut pairs = Vec::with_capacity(count.min(1024));
    for i in 0..count {
        let name_len = word(4 + i * 8)?;
        let value_len = word(8 + i * 8)?;
        let name = bytes.get(data..data.checked_add(name_len)?)?;
        data = data.checked_add(name_len + 1)?;
        let value = bytes.get(data..data.checked_add(value_len)?)?;
        data = data.checked_add(value_len + 1)?;
        pairs.push((
            String::from_utf8_lossy(name).to_ascii_lowercase(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    (data <= bytes.len()).then_some(pairs)
}

/// A length as the u32 the 32-bit guest expects (maps and bodies here are far below 4 GiB).
pub(crate) fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serialized_map_reads_back_unchanged() {
        let pairs = vec![
            (":status".to_string(), "200".to_string()),
            ("server".to_string(), String::new()),
        ];
        assert_eq!(deserialize_map(&serialize_map(&pairs)), Some(pairs));
    }

    #[test]
    fn a_truncated_map_is_rejected() {
        let bytes = serialize_map(&[("a".into(), "b".into())]);
        assert_eq!(deserialize_map(&bytes[..bytes.len() - 2]), None);
        assert_eq!(deserialize_map(&[0xff, 0xff, 0xff, 0xff]), None);
    }
}
