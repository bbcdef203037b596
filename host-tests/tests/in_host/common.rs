//! Hand-written WAT guests for tests of the host itself: just enough of a proxy-wasm module (ABI
//! marker, memory, bump allocator) around the functions a test needs.

/// Common imports and plumbing; `body` adds data segments and exports.
pub fn guest(body: &str) -> String {
    format!(
        r#"(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_current_time_nanoseconds" (func $now (param i32) (result i32)))
  (import "env" "proxy_set_tick_period_milliseconds" (func $tick_period (param i32) (result i32)))
  (import "env" "proxy_get_shared_data" (func $get_shared (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_shared_data" (func $set_shared (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_http_call" (func $http_call (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $get_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_replace_header_map_value" (func $replace_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $get_buffer (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $get_property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_effective_context" (func $set_effective_context (param i32) (result i32)))
  (import "env" "proxy_continue_stream" (func $continue_stream (param i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $send_local_response (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_stream" (func $grpc_stream (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_send" (func $grpc_send (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_cancel" (func $grpc_cancel (param i32) (result i32)))
  (import "env" "proxy_grpc_close" (func $grpc_close (param i32) (result i32)))
  (import "env" "proxy_get_status" (func $get_status (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 32768))
  (func (export "malloc") (param $size i32) (result i32) (local $at i32)
    (local.set $at (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $at))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "load") (param i32) (result i32) (i32.load (local.get 0)))
{body}
)"#
    )
}

/// `bytes` as a WAT string literal body.
pub fn wat_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:02x}")).collect()
}

/// A header map serialized as proxy-wasm does, as a WAT string literal body.
pub fn wat_map(pairs: &[(&str, &str)]) -> String {
    let mut bytes = (pairs.len() as u32).to_le_bytes().to_vec();
    for (name, value) in pairs {
        bytes.extend((name.len() as u32).to_le_bytes());
        bytes.extend((value.len() as u32).to_le_bytes());
    }
    for (name, value) in pairs {
        bytes.extend(name.as_bytes());
        bytes.push(0);
        bytes.extend(value.as_bytes());
        bytes.push(0);
    }
    wat_bytes(&bytes)
}
