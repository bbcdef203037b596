//! How much of a `/up` answer upcheck reads: at most `max_size` bytes, and none without
//! `expect_body`, whatever the backend sends. A backend answering its health check with 10 MB
//! must not cost the prober's VM 10 MB of linear memory every interval (Envoy has buffered the
//! whole answer already; what the module asks for is copied into its own memory), and
//! `expect_body` is judged on the bytes that were read: the body truncated at `max_size`.
//!
//! Linear memory only grows, in 64 KiB pages, so the pages a VM has after probing the big
//! answers, against those it had after the same rounds of small ones, bound what one read took.

use crate::support::ok;
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, HostOptions, UPCHECK_WASM};

/// The size of the big answer.
const BIG: usize = 10 * 1024 * 1024;
/// A wasm page.
const PAGE: u64 = 64 * 1024;
/// The probe interval (the default).
const INTERVAL: Duration = Duration::from_secs(10);
/// Probe rounds of each answer.
const ROUNDS: u32 = 5;
/// What a passing answer must contain.
const NEEDLE: &str = "READY";

/// An answer of `len` bytes: dots, with [`NEEDLE`] from byte `needle_at` if given.
fn body(len: usize, needle_at: Option<usize>) -> String {
    let mut body = ".".repeat(len);
    if let Some(at) = needle_at {
        body.replace_range(at..at + NEEDLE.len(), NEEDLE);
    }
    body
}

/// app1 alone, probed every 10 s, reading at most `max_size` bytes, passing on [`NEEDLE`] if
/// `expect` says so.
fn config(max_size: u64, expect: bool) -> String {
    let expect_body = if expect {
        format!("\"{NEEDLE}\"")
    } else {
        "null".to_owned()
    };
    format!(
        r#"{{"upstreams": [{{"name": "app1"}}],
            "health_checks": {{"active": {{"max_size": {max_size}, "expect_body": {expect_body}}}}}}}"#
    )
}

/// What probing a run of answers did.
struct Probed {
    /// Each VM's linear memory growth, in pages, while the second answer was probed for
    /// [`ROUNDS`] rounds after the first had been for as many.
    growth: Vec<u64>,
    /// The prober's VM.
    prober: usize,
    /// Whether app1 is in service at the end (`upcheck.app1.healthy`).
    healthy: bool,
    /// app1's last health change as logged, with its reason.
    verdict: String,
}

/// app1's `/up` answers `first` for [`ROUNDS`] probe rounds, then `then` for as many, under
/// `config`, in a host with one worker.
fn probe(config: &str, first: String, then: String) -> Probed {
    let mut host = Host::from_file(
        UPCHECK_WASM,
        HostOptions {
            workers: 1,
            ..HostOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"));
    let switch = ROUNDS * INTERVAL;
    host.upstream("app1")
        .path("/up", Behaviour::status(200).body(&first))
        .from(switch, Behaviour::status(200).body(&then));
    ok(host.start(config));
    ok(host.advance(switch - INTERVAL / 2));
    let before: Vec<u64> = (0..host.vm_count())
        .map(|vm| host.memory_pages(vm))
        .collect();
    ok(host.advance(ROUNDS * INTERVAL));
    let growth = (0..host.vm_count())
        .map(|vm| host.memory_pages(vm) - before[vm])
        .collect();
    let logs = host.logs();
    let prober = logs
        .iter()
        .rev()
        .find(|l| l.message.contains("now probes for the process"))
        .map(|l| l.vm)
        .unwrap_or_else(|| panic!("no VM took the probing lease"));
    let verdict = logs
        .iter()
        .rev()
        .find(|l| l.message.contains("app1 "))
        .map(|l| l.message.clone())
        .unwrap_or_default();
    Probed {
        growth,
        prober,
        healthy: host.metric("upcheck.app1.healthy") == Some(1),
        verdict,
    }
}

/// The pages a read of `max_size` bytes may take: the bytes, rounded up to pages, and one page
/// for the allocator's own bookkeeping around them.
fn pages_for(max_size: u64) -> u64 {
    max_size.div_ceil(PAGE) + 1
}

#[test]
fn a_ten_megabyte_answer_grows_the_probers_memory_by_max_size_and_a_page_at_most() {
    for max_size in [65_536, 1_048_576] {
        let probed = probe(
            &config(max_size, true),
            body(16, Some(0)),
            body(BIG, Some(0)),
        );
        println!(
            "max_size {max_size}: 5 probes of a 10 MB answer grew each VM by {:?} pages \
             (the prober is vm{}); app1 healthy: {}",
            probed.growth, probed.prober, probed.healthy
        );
        for (vm, &growth) in probed.growth.iter().enumerate() {
            let bound = if vm == probed.prober {
                pages_for(max_size)
            } else {
                0
            };
            assert!(
                growth <= bound,
                "max_size {max_size}: vm{vm} grew by {growth} pages, more than {bound}"
            );
        }
        assert!(probed.healthy, "{}", probed.verdict);
    }
}

#[test]
fn without_expect_body_not_a_byte_of_a_ten_megabyte_answer_is_read() {
    let probed = probe(&config(65_536, false), body(16, None), body(BIG, None));
    assert_eq!(probed.growth, [0, 0], "pages each VM grew by");
    assert!(probed.healthy, "{}", probed.verdict);
}

#[test]
fn expect_body_is_judged_on_the_answer_cut_at_max_size() {
    let max_size = 65_536;
    let judged = |needle_at: usize| {
        let answer = body(BIG, Some(needle_at));
        probe(&config(max_size as u64, true), answer.clone(), answer)
    };
    let inside = judged(max_size - NEEDLE.len());
    assert!(
        inside.healthy,
        "ending at byte {max_size}: {}",
        inside.verdict
    );
    for needle_at in [max_size - NEEDLE.len() + 1, BIG - NEEDLE.len()] {
        let outside = judged(needle_at);
        assert!(
            !outside.healthy && outside.verdict.contains("without the expected body"),
            "at byte {needle_at}: {}",
            outside.verdict
        );
    }
}
