//! The systemd units of a balancer on a VM, as `upcheck envoy -o FILE --units DIR` writes them:
//! [`ENVOY_UNIT`], Envoy on FILE, and, when FILE follows a fleet's membership in etcd,
//! [`FOLLOW_UNIT`], `upcheck backends --config FILE follow` beside it.
//!
//! Each unit states, in comments, why it restarts, starts and stops as it does. Both run as a
//! user of their own (not `DynamicUser=`: the follower writes files that outlive it, and Envoy
//! reads the fleet's client key, which an operator can give to a named user only), see the whole
//! file system read-only (`ProtectSystem=strict`) but for the membership's directory, which only
//! the follower may write, and hold no capability unless a listener's port is below 1024. The
//! paths are absolute: a service has no working directory of the operator's. docs/deploying.md
//! walks a VM from nothing to serving with them; `cli/tests/commands/units.rs` runs
//! `systemd-analyze verify` on them.

use std::path::{Path, PathBuf};

/// The file name of Envoy's unit.
pub const ENVOY_UNIT: &str = "upcheck-envoy.service";
/// The file name of the membership follower's unit.
pub const FOLLOW_UNIT: &str = "upcheck-follow.service";

/// What the units are written from: the balancer's paths, user and ports.
#[derive(Debug, Clone, PartialEq)]
pub struct Units {
    /// Envoy's binary, absolute. Default `/usr/local/bin/envoy`.
    pub envoy: PathBuf,
    /// The `upcheck` binary, absolute, which the follower runs. Default `/usr/local/bin/upcheck`.
    pub upcheck: PathBuf,
    /// The Envoy configuration (`upcheck envoy -o FILE`), absolute.
    pub config: PathBuf,
    /// upcheck.wasm, absolute (`--wasm`). Default `/etc/upcheck/upcheck.wasm`.
    pub wasm: PathBuf,
    /// The membership's directory (`FILE.d`), absolute, when FILE has one. Default: none, the
    /// single-file shape.
    pub membership: Option<PathBuf>,
    /// Whether FILE follows a fleet's membership in etcd, which a follower must then keep in its
    /// files. Default: no.
    pub follows: bool,
    /// The user (and group) both services run as. Default `upcheck`.
    pub user: String,
    /// Envoy's worker threads (`--concurrency`). Default 2.
    pub concurrency: u32,
    /// The ports Envoy listens on (users', admin, status page): one below 1024 needs
    /// `CAP_NET_BIND_SERVICE`.
    pub ports: Vec<u16>,
}

/// The units, each its file name and its text: Envoy's, then the follower's when FILE follows
/// a fleet.
pub fn units(u: &Units) -> Vec<(&'static str, String)> {
    let mut all = vec![(ENVOY_UNIT, envoy(u))];
    if u.follows {
        all.push((FOLLOW_UNIT, follower(u)));
    }
    all
}

/// Where a path cannot be for a service these units run: what hides it, if anything does.
pub fn hidden(path: &Path) -> Option<&'static str> {
    let under = |dir: &str| path.starts_with(dir);
    if ["/home", "/root", "/run/user"].into_iter().any(under) {
        Some("ProtectHome=yes hides it from the services")
    } else if ["/tmp", "/var/tmp"].into_iter().any(under) {
        Some("PrivateTmp=yes gives the services a /tmp of their own")
    } else if !path.is_absolute() {
        Some("a service has no working directory to resolve it from")
    } else {
        None
    }
}

/// A path as systemd reads it in a command line or a list: spaces and quotes escaped.
fn quoted(path: &Path) -> String {
    let text = path.display().to_string();
    if text.contains([' ', '"', '\'', '\\']) {
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        text
    }
}

/// Appends `text` to `out` as a comment, wrapped at 100 columns, every line starting `# `.
fn note(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 100 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// Appends each of `settings` to `out`, one a line.
fn set(out: &mut String, settings: &[&str]) {
    for setting in settings {
        out.push_str(setting);
        out.push('\n');
    }
}

/// The sandbox both services share, for a service that may write `writable` (none: nothing),
/// compiles code at run time (`jit`) and binds a port below 1024 (`bind_low`).
fn hardening(out: &mut String, u: &Units, writable: Option<&Path>, jit: bool, bind_low: bool) {
    out.push('\n');
    note(
        out,
        &format!(
            "A user of its own, never root. Create it once: useradd --system --no-create-home \
             --shell /usr/sbin/nologin {}",
            u.user
        ),
    );
    set(
        out,
        &[&format!("User={}", u.user), &format!("Group={}", u.user)],
    );
    note(
        out,
        "The whole file system read-only, /home, /root and /tmp out of sight, no devices, no \
         way to gain privileges, the system calls of an ordinary service only (another fails \
         with EPERM rather than killing the process).",
    );
    set(
        out,
        &[
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "PrivateDevices=yes",
            "PrivateMounts=yes",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "ProtectProc=invisible",
            "RestrictNamespaces=yes",
            "RestrictRealtime=yes",
            "RestrictSUIDSGID=yes",
            "LockPersonality=yes",
            "RemoveIPC=yes",
            "SystemCallArchitectures=native",
            "SystemCallFilter=@system-service",
            "SystemCallErrorNumber=EPERM",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        ],
    );
    if jit {
        note(
            out,
            "No MemoryDenyWriteExecute=: V8, which runs upcheck.wasm, compiles it to machine \
             code at run time.",
        );
    } else {
        set(out, &["MemoryDenyWriteExecute=yes"]);
    }
    let config_dir = quoted(u.config.parent().unwrap_or(Path::new("/")));
    match writable {
        Some(dir) => {
            let dir = quoted(dir);
            note(
                out,
                &format!(
                    "Read-only but for the membership's directory, which it rewrites as the \
                     fleet's membership changes (owned by {user}: chown -R {user}: {dir}). New \
                     files there are readable by all (UMask), as Envoy's configuration is.",
                    user = u.user
                ),
            );
            set(
                out,
                &[
                    &format!("ReadOnlyPaths={config_dir}"),
                    &format!("ReadWritePaths={dir}"),
                    "UMask=0022",
                ],
            );
        }
        None => {
            note(
                out,
                "Reads its configuration, the membership's files and the module; writes nothing \
                 (its log goes to the journal).",
            );
            set(out, &[&format!("ReadOnlyPaths={config_dir}")]);
        }
    }
    if bind_low {
        let ports: Vec<String> = u
            .ports
            .iter()
            .filter(|p| **p < 1024)
            .map(u16::to_string)
            .collect();
        note(
            out,
            &format!(
                "Port {} is below 1024: the one capability that binds it, and no other.",
                ports.join(", ")
            ),
        );
        set(
            out,
            &[
                "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
                "AmbientCapabilities=CAP_NET_BIND_SERVICE",
            ],
        );
    } else {
        note(
            out,
            "Every listener's port is 1024 or above: no capability at all.",
        );
        set(out, &["CapabilityBoundingSet="]);
    }
}

/// The restart policy's start limit, in `[Unit]`, for the unit `name`.
fn start_limit(out: &mut String, name: &str) {
    note(
        out,
        &format!(
            "A service that cannot start (a bad edit, a missing file) is tried 5 times in 2 \
             minutes, then left failed for the operator: `journalctl -u {name}` says why."
        ),
    );
    set(out, &["StartLimitIntervalSec=120", "StartLimitBurst=5"]);
}

/// Envoy's unit.
fn envoy(u: &Units) -> String {
    let config = quoted(&u.config);
    let mut out = String::new();
    note(
        &mut out,
        &format!(
            "Written by `upcheck envoy --units`: Envoy with upcheck, on {config}, loading {} \
             (--wasm). Install: copy it to /etc/systemd/system/, then `systemctl daemon-reload \
             && systemctl enable --now {ENVOY_UNIT}` (docs/deploying.md).",
            quoted(&u.wasm)
        ),
    );
    out.push_str("\n[Unit]\n");
    set(
        &mut out,
        &[&format!("Description=Envoy with upcheck ({config})")],
    );
    note(
        &mut out,
        "The backends are on other machines: start once the network is up, not merely \
         configured.",
    );
    set(
        &mut out,
        &["Wants=network-online.target", "After=network-online.target"],
    );
    start_limit(&mut out, ENVOY_UNIT);
    out.push_str("\n[Service]\n");
    set(&mut out, &["Type=simple"]);
    note(
        &mut out,
        "--disable-hot-restart: a restart here is systemd starting a new Envoy (a hot restart \
         needs Envoy's hot-restarter wrapper and shared memory this sandbox does not give). \
         Its log goes to the journal.",
    );
    set(
        &mut out,
        &[&format!(
            "ExecStart={} -c {config} --concurrency {} --disable-hot-restart",
            quoted(&u.envoy),
            u.concurrency
        )],
    );
    note(
        &mut out,
        "Envoy exits 0 only when asked to (admin /quitquitquit): it then stays stopped. Any \
         other exit restarts it 2 s later, and it reads the membership's files again, so it \
         serves the backends it served. (systemd 254's RestartSteps= would grow the delay; \
         Debian 12 has 252.)",
    );
    set(&mut out, &["Restart=on-failure", "RestartSec=2s"]);
    note(
        &mut out,
        "A connection per user and per backend: the default 1024 descriptors run out first.",
    );
    set(&mut out, &["LimitNOFILE=65536"]);
    let bind_low = u.ports.iter().any(|p| *p < 1024);
    hardening(&mut out, u, None, true, bind_low);
    out.push_str("\n[Install]\n");
    set(&mut out, &["WantedBy=multi-user.target"]);
    out
}

/// The follower's unit.
fn follower(u: &Units) -> String {
    let config = quoted(&u.config);
    let dir = u
        .membership
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.d", u.config.display())));
    let mut out = String::new();
    note(
        &mut out,
        &format!(
            "Written by `upcheck envoy --units`: this balancer follows its fleet's membership \
             in etcd, and makes the files of {config} say what it says. Install beside \
             {ENVOY_UNIT}: `systemctl enable --now {FOLLOW_UNIT}`."
        ),
    );
    out.push_str("\n[Unit]\n");
    set(
        &mut out,
        &[&format!(
            "Description=upcheck's membership follower for {config}"
        )],
    );
    note(&mut out, "etcd is on other machines.");
    set(&mut out, &["Wants=network-online.target"]);
    note(
        &mut out,
        &format!(
            "After Envoy: the follower confirms each change on Envoy's admin interface, then up. \
             PartOf: `systemctl stop` or `restart` of {ENVOY_UNIT} does the same to the \
             follower (restarted, it reads the membership afresh). Not Requires= or BindsTo=: \
             while Envoy is down or restarting after a failure, the follower keeps the files \
             current, so the Envoy that comes back reads the fleet's membership of that moment."
        ),
    );
    set(
        &mut out,
        &[
            &format!("After=network-online.target {ENVOY_UNIT}"),
            &format!("PartOf={ENVOY_UNIT}"),
        ],
    );
    start_limit(&mut out, FOLLOW_UNIT);
    out.push_str("\n[Service]\n");
    set(
        &mut out,
        &[
            "Type=simple",
            &format!(
                "ExecStart={} backends --config {config} follow",
                quoted(&u.upcheck)
            ),
        ],
    );
    note(
        &mut out,
        "It rides out etcd's outages itself (it reads the membership again). It exits on a \
         failure, restarted 2 s later, or with status 2 when the file cannot be followed at all \
         (not written with --etcd, unreadable), which a restart would not change.",
    );
    set(
        &mut out,
        &[
            "Restart=on-failure",
            "RestartSec=2s",
            "RestartPreventExitStatus=2",
        ],
    );
    hardening(&mut out, u, Some(&dir), false, false);
    out.push_str("\n[Install]\n");
    note(
        &mut out,
        "Enabled, it starts whenever Envoy does, and so at boot.",
    );
    set(&mut out, &[&format!("WantedBy={ENVOY_UNIT}")]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units_for(ports: Vec<u16>, follows: bool) -> Units {
        Units {
            envoy: "/usr/local/bin/envoy".into(),
            upcheck: "/usr/local/bin/upcheck".into(),
            config: "/etc/upcheck/envoy.yaml".into(),
            wasm: "/etc/upcheck/upcheck.wasm".into(),
            membership: Some("/etc/upcheck/envoy.yaml.d".into()),
            follows,
            user: "upcheck".into(),
            concurrency: 2,
            ports,
        }
    }

    fn lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn a_balancer_alone_gets_envoys_unit_only_and_a_fleets_gets_the_follower_too() {
        let names = |u: &Units| units(u).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(&units_for(vec![8080], false)), [ENVOY_UNIT]);
        assert_eq!(
            names(&units_for(vec![8080], true)),
            [ENVOY_UNIT, FOLLOW_UNIT]
        );
    }

    #[test]
    fn envoy_runs_the_configuration_with_its_workers_and_no_capability_above_port_1023() {
        let text = envoy(&units_for(vec![8080, 9901, 9902], false));
        let lines = lines(&text);
        assert!(lines.contains(
            &"ExecStart=/usr/local/bin/envoy -c /etc/upcheck/envoy.yaml --concurrency 2 \
              --disable-hot-restart"
        ));
        assert!(lines.contains(&"CapabilityBoundingSet="), "{text}");
        assert!(!text.contains("AmbientCapabilities"), "{text}");
        assert!(!lines.iter().any(|l| l.starts_with("ReadWritePaths")));
    }

    #[test]
    fn a_listener_below_1024_gets_the_capability_to_bind_it_and_no_other() {
        let text = envoy(&units_for(vec![80, 9901, 9902], false));
        let lines = lines(&text);
        assert!(lines.contains(&"CapabilityBoundingSet=CAP_NET_BIND_SERVICE"));
        assert!(lines.contains(&"AmbientCapabilities=CAP_NET_BIND_SERVICE"));
        assert!(text.contains("# Port 80 is below 1024"), "{text}");
    }

    #[test]
    fn the_follower_writes_the_membership_directory_only_and_follows_envoy() {
        let text = follower(&units_for(vec![8080], true));
        let lines = lines(&text);
        for line in [
            "ExecStart=/usr/local/bin/upcheck backends --config /etc/upcheck/envoy.yaml follow",
            "ReadWritePaths=/etc/upcheck/envoy.yaml.d",
            "After=network-online.target upcheck-envoy.service",
            "PartOf=upcheck-envoy.service",
            "WantedBy=upcheck-envoy.service",
            "RestartPreventExitStatus=2",
            "MemoryDenyWriteExecute=yes",
        ] {
            assert!(lines.contains(&line), "no {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_path_with_a_space_is_quoted_for_systemd() {
        assert_eq!(
            quoted(Path::new("/srv/my lb/envoy.yaml")),
            "\"/srv/my lb/envoy.yaml\""
        );
        assert_eq!(quoted(Path::new("/etc/upcheck")), "/etc/upcheck");
    }

    #[test]
    fn paths_a_service_cannot_see_are_named_with_the_option_that_hides_them() {
        assert!(hidden(Path::new("/root/envoy")).is_some_and(|w| w.contains("ProtectHome")));
        assert!(hidden(Path::new("/tmp/envoy.yaml")).is_some_and(|w| w.contains("PrivateTmp")));
        assert!(hidden(Path::new("envoy.yaml")).is_some());
        assert_eq!(hidden(Path::new("/etc/upcheck/envoy.yaml")), None);
    }
}
