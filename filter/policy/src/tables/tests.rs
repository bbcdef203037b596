use super::bytes::{FLEET, HISTORY, VERSION};
use super::*;
use crate::active::{ActiveHealth, Pages, ProbeOutcome};
use crate::history::{Change, HistoryTable, MAX_CAUSE_LEN, MAX_KEY_LEN};
use crate::lease::LeaseTable;
use crate::outcome::About;
use crate::outcome::{Contact, FailureKind, RequestOutcome};
use crate::outlier::{RunRule, Traffic};
use crate::passive::Remembered;
use crate::passive::{PassiveHealth, Recorded};
use proptest::prelude::*;
use std::time::Duration;
use upcheck_config::{Config, HealthChecks, MAX_FAILS_LIMIT, MAX_HISTORY, MAX_UPSTREAMS};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn config() -> Config {
    Config::parse(br#"{"upstreams":[{"name":"a"}]}"#).unwrap_or_else(|e| panic!("{e}"))
}

fn said() -> impl Strategy<Value = crate::active::Said> {
    use crate::active::Said;
    use crate::grpc::health::Serving;
    use crate::grpc::status::Code;
    prop_oneof![
        any::<u16>().prop_map(Said::Status),
        Just(Said::WithoutBody),
        (0u32..20).prop_map(|n| Said::Grpc(Code::of(n))),
        prop_oneof![
            Just(Serving::Unknown),
            Just(Serving::NotServing),
            Just(Serving::ServiceUnknown)
        ]
        .prop_map(Said::Health),
    ]
}

fn probe_outcome() -> impl Strategy<Value = ProbeOutcome> {
    prop_oneof![
        Just(ProbeOutcome::Pass),
        said().prop_map(ProbeOutcome::Soft),
        (0u64..10_000).prop_map(|ms| ProbeOutcome::Timeout(Duration::from_millis(ms))),
        Just(ProbeOutcome::Refused),
    ]
}

fn pages() -> impl Strategy<Value = Pages> {
    prop_oneof![
        Just(Pages::Unknown),
        Just(Pages::Answering),
        Just(Pages::AnsweredMeanwhile),
    ]
}

proptest! {
    #[test]
    fn any_probe_table_survives_the_round_trip(
        entries in proptest::collection::vec(
            ("\\PC{0,12}", proptest::collection::vec((probe_outcome(), 0u64..1_000_000, pages()), 0..6)),
            0..8,
        )
    ) {
        let active = config().health_checks.active;
        let table: ActiveTable = entries
            .into_iter()
            .map(|(name, probes)| {
                let mut health = ActiveHealth::new(Duration::ZERO);
                for (outcome, ms, pages) in probes {
                    health.observe(outcome, Duration::from_millis(ms), &active, pages);
                }
                (name, health)
            })
            .collect();
        prop_assert_eq!(decode_active(&encode_active(&table)), Ok(table));
    }

    #[test]
    fn any_passive_table_survives_the_round_trip(
        entries in proptest::collection::vec(
            ("\\PC{0,12}", proptest::collection::vec((0u64..100_000, any::<Option<bool>>(), any::<bool>()), 0..8)),
            0..8,
        )
    ) {
        let checks = config().health_checks;
        let mut table = PassiveTable::new();
        for (name, changes) in entries {
            for (ms, refused, failed) in changes {
                let at = Duration::from_millis(ms);
                let kind = failed.then_some(FailureKind::Status(502));
                let mut traffic = Traffic::default();
                traffic.record(at, kind, Some(Duration::from_millis(ms % 300)), checks.outlier.window);
                let changes = [
                    PassiveChange::Request(RequestNews {
                        key: name.clone(),
                        at,
                        contact: refused.map(|r| if r { Contact::Refused } else { Contact::Reached }),
                        failure: RequestOutcome::Answered { status: 502, latency: Duration::ZERO, grpc: None }
                            .failure(&checks.passive)
                            .filter(|_| failed),
                        outlier: Some(OutlierNews {
                            failure: kind,
                            run: Some(RunRule { limit: 2, peers_failed: 0, peers_requests: 9 }),
                            verdict: None,
                        }),
                    }),
                    PassiveChange::Traffic(vec![(name.clone(), traffic)]),
                ];
                for change in changes {
                    change.apply(&mut table, &checks);
                }
            }
        }
        prop_assert_eq!(decode_passive(&encode_passive(&table)), Ok(table));
    }
}

#[test]
fn bytes_that_are_not_a_table_of_this_version_are_an_error_not_a_panic() {
    let checks = config().health_checks;
    let mut table = PassiveTable::new();
    news("app1", secs(1), &checks).apply(&mut table, &checks);
    let good = encode_passive(&table);
    for len in 0..good.len() {
        assert!(
            decode_passive(good.get(..len).unwrap_or_default()).is_err(),
            "prefix of {len}"
        );
    }
    assert!(
        decode_active(&good).is_err(),
        "a passive table is not a probe table"
    );
    let mut older = good.clone();
    if let Some(version) = older.get_mut(3) {
        *version = VERSION - 1;
    }
    assert!(
        decode_passive(&older).is_err(),
        "another version is refused"
    );
    assert!(decode_passive(b"{\"app1\": {}}").is_err());
    let mut trailing = good;
    trailing.push(0);
    assert!(decode_passive(&trailing).is_err());
}

#[test]
fn a_lease_table_survives_the_round_trip_and_no_other_table_reads_as_one() {
    let mut leases = LeaseTable::new();
    for (config, holder) in [(u64::MAX, 1), (0, u64::MAX), (7, 3)] {
        crate::lease::claim(&mut leases, config, holder, secs(1), secs(1));
    }
    assert_eq!(decode_leases(&encode_leases(&leases)), Ok(leases));
    let announce = encode_announce(&vec![("app1".to_owned(), 7)]);
    assert!(decode_leases(&announce).is_err());
    assert!(decode_leases(&[0; 16]).is_err(), "a lease of the old form");
}

#[test]
fn a_fleet_record_is_bounded_and_no_other_table_reads_as_one() {
    let entries = vec![(String::new(), 1); FLEET_HEAD];
    assert_eq!(decode_fleet(&encode_fleet(&entries)), Ok(entries));
    let headless = vec![(String::new(), 1); FLEET_HEAD - 1];
    assert!(decode_fleet(&encode_fleet(&headless)).is_err());
    let long = vec![("k".repeat(MAX_KEY_LEN + 1), 0)];
    assert!(decode_fleet(&encode_fleet(&long)).is_err());
    assert!(decode_fleet(&encode_announce(&vec![(String::new(), 1)])).is_err());
    assert!(decode_fleet(&encode_history(&HistoryTable::default())).is_err());
    assert_eq!(fleet_key("site/pool-1"), "upcheck.v7.fleet.site/pool-1");
}

proptest! {
    #[test]
    fn any_bytes_under_the_fleet_tag_decode_or_are_refused_without_a_panic(
        body in proptest::collection::vec(any::<u8>(), 0..256)
    ) {
        let mut bytes = vec![b'u', b'c', FLEET, VERSION];
        bytes.extend(body);
        if let Ok(entries) = decode_fleet(&bytes) {
            prop_assert!(entries.len() <= MAX_UPSTREAMS + 4);
        }
    }
}

proptest! {
    #[test]
    fn any_bytes_under_the_history_tag_decode_or_are_refused_without_a_panic(
        body in proptest::collection::vec(any::<u8>(), 0..256)
    ) {
        let mut bytes = vec![b'u', b'c', HISTORY, VERSION];
        bytes.extend(body);
        if let Ok(table) = decode_history(&bytes) {
            prop_assert!(table.len() <= MAX_HISTORY as usize);
        }
    }
}

fn change(cause: &str) -> Change {
    Change {
        at: secs(1),
        backend: Some("app2".into()),
        key: "app2@app2".into(),
        kind: crate::history::Kind::Ejected,
        cause: cause.into(),
    }
}

#[test]
fn a_history_that_is_cut_short_mislabelled_or_oversized_is_refused() {
    let good = encode_history(&vec![change("ejected for 30s")]);
    assert!(decode_history(&good).is_ok());
    for len in 0..good.len() {
        assert!(
            decode_history(good.get(..len).unwrap_or_default()).is_err(),
            "prefix of {len}"
        );
    }
    assert!(
        decode_passive(&good).is_err(),
        "a history is not a passive table"
    );
    let long = encode_history(&vec![change(&"x".repeat(MAX_CAUSE_LEN + 1))]);
    assert!(
        decode_history(&long).is_err(),
        "a cause longer than any written"
    );
    let many = vec![change("c"); MAX_HISTORY as usize + 1];
    assert!(
        decode_history(&encode_history(&many)).is_err(),
        "more than the limit"
    );
}

#[test]
fn a_table_claiming_more_failures_than_any_max_fails_is_refused() {
    let health = PassiveHealth {
        failures: (0..=u64::from(MAX_FAILS_LIMIT))
            .map(|n| Remembered {
                at: secs(n),
                about: About::Backend,
            })
            .collect(),
        ..PassiveHealth::default()
    };
    let bytes = encode_passive(&vec![("a".to_owned(), health)]);
    assert!(decode_passive(&bytes).is_err());
}

/// A 502 at `name`, at `at`, that counts for both the failure window and the run rule.
fn news(name: &str, at: Duration, checks: &HealthChecks) -> PassiveChange {
    PassiveChange::Request(RequestNews {
        key: name.into(),
        at,
        contact: Some(Contact::Reached),
        failure: RequestOutcome::Answered {
            status: 502,
            latency: Duration::ZERO,
            grpc: None,
        }
        .failure(&checks.passive),
        outlier: Some(OutlierNews {
            failure: Some(FailureKind::Status(502)),
            run: Some(RunRule {
                limit: 5,
                peers_failed: 0,
                peers_requests: 40,
            }),
            verdict: None,
        }),
    })
}

#[test]
fn a_change_adds_a_backend_the_table_did_not_have_and_reports_the_window_filling() {
    let checks = config().health_checks;
    let mut table = PassiveTable::new();
    let applied: Vec<Applied> = (1..=3)
        .map(|t| news("app2", secs(t), &checks).apply(&mut table, &checks))
        .collect();
    assert_eq!(table.len(), 1);
    assert!(matches!(
        applied.last(),
        Some(Applied {
            failure: Some((_, Recorded::Filled { .. })),
            ..
        })
    ));
    let took_out: Vec<bool> = applied.iter().map(Applied::takes_out).collect();
    assert_eq!(
        took_out,
        [false, false, true],
        "only the failure that filled it"
    );
}

#[test]
fn the_run_rule_ejects_at_its_limit_once_and_a_success_resets_the_run() {
    let checks = config().health_checks;
    let mut table = PassiveTable::new();
    let ejected: Vec<bool> = (1..=6)
        .map(|t| {
            news("app2", secs(t), &checks)
                .apply(&mut table, &checks)
                .ejection
                .is_some()
        })
        .collect();
    assert_eq!(ejected, [false, false, false, false, true, false]);
    // The ejection takes the backend out, whatever the window says.
    let mut table = PassiveTable::new();
    let applied: Vec<Applied> = (1..=6)
        .map(|t| news("app2", secs(t), &checks).apply(&mut table, &checks))
        .collect();
    let ejecting = applied.iter().find(|a| a.ejection.is_some());
    assert!(ejecting.is_some_and(Applied::takes_out), "{applied:?}");
    let success = PassiveChange::Request(RequestNews {
        key: "app2".into(),
        at: secs(7),
        contact: Some(Contact::Reached),
        failure: None,
        outlier: Some(OutlierNews {
            failure: None,
            run: None,
            verdict: None,
        }),
    });
    success.apply(&mut table, &checks);
    assert_eq!(table.first().map(|(_, h)| h.run), Some(0));
}

#[test]
fn failures_dated_at_the_end_of_time_are_taken_in_without_a_panic() {
    // Another plugin in the same vm_id can write a table of this version with any times.
    let config = Config::parse(br#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let checks = config.health_checks.clone();
    let mut table = PassiveTable::new();
    for before_the_end in [2, 1, 0] {
        news("app2", Duration::MAX - secs(before_the_end), &checks).apply(&mut table, &checks);
    }
    let table = decode_passive(&encode_passive(&table)).expect("a table of this version");
    let now = secs(10);
    let mut pool = crate::pool::Pool::new(config, now, |_| ());
    let _ = pool.passive_published(&table, now);
    // Past the cold start's wait for a first probe: unknown backends serve.
    let later = now + secs(6);
    let _ = pool.tick(later);
    let app1 = pool.index_of("app1");
    assert_eq!(
        pool.pick(later),
        crate::pool::Pick::Backend(app1.expect("configured")),
        "app2's failures are in force, app1 serves"
    );
}

#[test]
fn every_shared_data_key_names_the_format_version_its_tables_are_written_in() {
    let prefix = format!("upcheck.v{VERSION}.");
    for key in [
        keys::LEASES,
        keys::ANNOUNCE,
        keys::ACTIVE,
        keys::PASSIVE,
        keys::HISTORY,
    ] {
        assert!(
            key.starts_with(&prefix),
            "{key} is not named for version {VERSION}"
        );
    }
}
