//! `upcheck backends` on a fleet whose etcd runs as docs/fleet.md recommends: TLS, a client
//! certificate required, authentication on and the two roles of `upcheck_cli::etcd_roles`. The
//! operator's command reaches it as FILE says the balancers do, with the operator's own
//! certificate and user: the operators' role changes the membership, the balancers' cannot, a
//! certificate of another CA is refused, and nothing crosses in plain text. A real etcd
//! (`UPCHECK_ETCD`, as `make commands` sets it); no Envoy runs, so no follower reports and the
//! command says so.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use upcheck_cli::etcd_roles;
use upcheck_e2e::etcd::Etcd;
use upcheck_e2e::tls::Certificates;

const BALANCER_PASSWORD: &str = "balancers-secret";
const OPERATOR_PASSWORD: &str = "operators-secret";

/// Runs `upcheck backends --config envoy.yaml args` in `dir`, with `env` and none of the
/// caller's `UPCHECK_ETCD_*`.
fn backends(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_upcheck"));
    command
        .args(["backends", "--config", "envoy.yaml"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null());
    for var in [
        "UPCHECK_ETCD_CERT",
        "UPCHECK_ETCD_KEY",
        "UPCHECK_ETCD_USER",
        "UPCHECK_ETCD_PASSWORD",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("upcheck runs")
}

/// What `output` printed, both streams, for a failure's message.
fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The one line a refused command printed on standard error, checked to be one.
fn one_line(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "it succeeded: {}", said(output));
    let line = text.strip_suffix('\n').expect("ends its line");
    assert!(!line.contains('\n'), "one line: {text}");
    assert!(!line.contains("  "), "one line, as written: {text}");
    line.to_owned()
}

/// FILE as `upcheck envoy --membership --etcd … --etcd-ca --etcd-cert --etcd-key` writes it
/// for a fleet reaching `members` over TLS with `certificates`, the balancers' user in the
/// plugin configuration.
fn written(dir: &Path, members: &str, certificates: &Certificates) {
    let input = format!(
        r#"{{"routing":"host","upstreams":[
            {{"name":"app1","address":"127.0.0.1:3001"}},
            {{"name":"app2","address":"127.0.0.1:3002"}}],
           "fleet":{{"cluster":"etcd","user":"balancer","password":"{BALANCER_PASSWORD}"}}}}"#
    );
    fs::write(dir.join("input.json"), input).expect("input written");
    let path = |p: &Path| p.display().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_upcheck"))
        .args(["envoy", "input.json", "--membership", "-o", "envoy.yaml"])
        .args(["--admin", "127.0.0.1:1", "--status", "127.0.0.1:2"])
        .args(["--etcd", members])
        .args(["--etcd-ca", &path(&certificates.ca)])
        .args(["--etcd-cert", &path(&certificates.client.cert)])
        .args(["--etcd-key", &path(&certificates.client.key)])
        .current_dir(dir)
        .output()
        .expect("upcheck runs");
    assert!(output.status.success(), "{}", said(&output));
}

#[tokio::test]
async fn on_a_fleet_with_tls_and_roles_only_the_operators_certificate_and_role_change_the_membership(
) {
    let mut etcd = Etcd::start_tls(1).await.expect("etcd with TLS");
    let certificates = etcd.certificates().expect("TLS is on").clone();
    let operator = certificates
        .another_client("operator")
        .expect("the operator's certificate");
    let elsewhere = tempfile::tempdir().expect("a directory");
    let foreign = Certificates::make(elsewhere.path()).expect("another CA");
    etcd.enable_roles(&[
        (
            "balancer",
            BALANCER_PASSWORD,
            "upcheck-balancer",
            etcd_roles::balancers("upcheck"),
        ),
        (
            "operator",
            OPERATOR_PASSWORD,
            "upcheck-operator",
            etcd_roles::operators("upcheck"),
        ),
    ])
    .await
    .expect("authentication on");
    let members: Vec<String> = etcd.clients().iter().map(|a| a.to_string()).collect();
    let dir = tempfile::tempdir().expect("a directory");
    written(dir.path(), &members.join(","), &certificates);

    let (cert, key) = (
        operator.cert.display().to_string(),
        operator.key.display().to_string(),
    );
    let as_operator = [
        ("UPCHECK_ETCD_CERT", cert.as_str()),
        ("UPCHECK_ETCD_KEY", key.as_str()),
        ("UPCHECK_ETCD_PASSWORD", OPERATOR_PASSWORD),
    ];
    let added = backends(
        dir.path(),
        &[
            "--user",
            "operator",
            "add",
            "app3",
            "127.0.0.1:3003",
            "--by",
            "alice@ops-1",
            "--reason",
            "more capacity for the sale",
        ],
        &as_operator,
    );
    println!("add as the operator:\n{}", said(&added));
    assert!(added.status.success(), "{}", said(&added));
    let listed = backends(dir.path(), &["--user", "operator", "list"], &as_operator);
    println!("list:\n{}", said(&listed));
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let app3 = listed
        .lines()
        .find(|l| l.contains("\tapp3\t127.0.0.1:3003\t"))
        .unwrap_or_else(|| panic!("app3 not listed: {listed}"));
    assert!(
        app3.contains("\tadd 127.0.0.1:3003 by alice@ops-1 at ")
            && app3.ends_with(" UTC: more capacity for the sale"),
        "app3's line says who and why: {app3}"
    );
    let history = backends(dir.path(), &["--user", "operator", "history"], &as_operator);
    println!("history:\n{}", said(&history));
    let history = String::from_utf8_lossy(&history.stdout).into_owned();
    assert!(
        history.contains("\tapp3\tadd 127.0.0.1:3003\tby alice@ops-1: more capacity for the sale"),
        "{history}"
    );

    // The balancers' own certificate and user (FILE's, the default) may not write it.
    let as_balancer = backends(dir.path(), &["add", "app4", "127.0.0.1:3004"], &[]);
    let line = one_line(&as_balancer);
    println!("add with the balancers' certificate and user: {line}");
    assert_eq!(as_balancer.status.code(), Some(1), "{line}");
    assert!(
        line.contains("etcd refused to let user balancer write upcheck/v1/membership")
            && line.contains("permission denied"),
        "{line}"
    );

    // A certificate of another CA is refused in the handshake.
    let (cert, key) = (
        foreign.client.cert.display().to_string(),
        foreign.client.key.display().to_string(),
    );
    let wrong = backends(
        dir.path(),
        &[
            "--cert",
            &cert,
            "--key",
            &key,
            "--user",
            "operator",
            "add",
            "app5",
            "127.0.0.1:3005",
        ],
        &[("UPCHECK_ETCD_PASSWORD", OPERATOR_PASSWORD)],
    );
    let line = one_line(&wrong);
    println!("add with a certificate of another CA: {line}");
    // etcd's alert, or (when the connection closed under the request before it was read) the
    // same advice.
    assert!(
        line.contains("etcd refused the client certificate")
            || line.contains("it most likely refused the client certificate"),
        "{line}"
    );

    let membership = etcd
        .range("upcheck/v1/membership")
        .await
        .expect("read as root");
    let value = membership
        .first()
        .map(|(_, v, _)| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    assert!(value.contains("\"app3\""), "{value}");
    assert!(
        !value.contains("app4") && !value.contains("app5"),
        "a refused change was written: {value}"
    );
}

/// A listener that takes one connection and keeps every byte the client sent, for 2 s.
fn eavesdropper() -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bound");
    let addr = listener.local_addr().expect("its address");
    let heard = std::thread::spawn(move || {
        let (mut peer, _) = listener.accept().expect("a connection");
        peer.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("a timeout");
        let mut heard = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = peer.read(&mut buf) {
            if n == 0 {
                break;
            }
            heard.extend_from_slice(&buf[..n]);
        }
        heard
    });
    (addr, heard)
}

#[test]
fn a_fleet_on_tls_is_never_spoken_to_in_plain_text_even_by_a_member_that_answers_plain() {
    let dir = tempfile::tempdir().expect("a directory");
    let certificates = Certificates::make(dir.path()).expect("a CA");
    let (member, heard) = eavesdropper();
    written(dir.path(), &member.to_string(), &certificates);
    let output = backends(
        dir.path(),
        &["--user", "operator", "add", "app3", "127.0.0.1:3003"],
        &[("UPCHECK_ETCD_PASSWORD", OPERATOR_PASSWORD)],
    );
    let line = one_line(&output);
    let heard = String::from_utf8_lossy(&heard.join().expect("the listener")).into_owned();
    assert!(
        !heard.contains(OPERATOR_PASSWORD)
            && !heard.contains("POST")
            && !heard.contains("operator"),
        "sent in plain text: {heard:?}"
    );
    assert!(line.contains(&format!("etcd at {member}")), "{line}");
}

#[test]
fn a_client_certificate_for_a_fleet_on_plain_http_is_refused_as_protecting_nothing() {
    let dir = tempfile::tempdir().expect("a directory");
    let input = r#"{"routing":"host","upstreams":[{"name":"app1","address":"127.0.0.1:3001"}]}"#;
    fs::write(dir.path().join("input.json"), input).expect("input written");
    let output = Command::new(env!("CARGO_BIN_EXE_upcheck"))
        .args(["envoy", "input.json", "--membership", "-o", "envoy.yaml"])
        .args(["--etcd", "127.0.0.1:1"])
        .current_dir(dir.path())
        .output()
        .expect("upcheck runs");
    assert!(output.status.success(), "{}", said(&output));
    let refused = backends(
        dir.path(),
        &["--cert", "/etc/op.pem", "--key", "/etc/op.key", "list"],
        &[],
    );
    let line = one_line(&refused);
    assert_eq!(refused.status.code(), Some(2), "{line}");
    assert!(
        line.contains("--cert /etc/op.pem") && line.contains("over plain HTTP"),
        "{line}"
    );
    let no_password = backends(dir.path(), &["--user", "operator", "list"], &[]);
    let line = one_line(&no_password);
    assert!(
        line.contains("--user operator: its password is read from UPCHECK_ETCD_PASSWORD"),
        "{line}"
    );
}
