//! How `upcheck backends` reaches a fleet's etcd: as FILE says the balancers reach it (its
//! members, TLS or not, the CA and the server name), with the operator's own credentials.
//!
//! An operator shows a client certificate (`--cert` and `--key`, or `UPCHECK_ETCD_CERT` and
//! `UPCHECK_ETCD_KEY`) and authenticates as a user (`--user` or `UPCHECK_ETCD_USER`, the
//! password from `UPCHECK_ETCD_PASSWORD` only, never from the command line): [`Access`]. What
//! is not given is taken from FILE, the balancers' own (their certificate, the plugin
//! configuration's `fleet.user`), so that a command run on a balancer as before still works
//! where etcd lets the balancers' role write the membership. A fleet whose FILE says TLS is
//! reached over TLS only; a certificate given for a fleet on plain HTTP is refused, since it
//! would protect nothing.
//!
//! Through etcd 3.4's JSON gateway a client certificate proves that its holder may connect
//! (`--client-cert-auth`), not who it is: with authentication on, the gateway answers 400 to a
//! certificate carrying a Common Name, so the user is always the one of the password.

use std::path::{Path, PathBuf};

use crate::etcd::{ClientCertificate, Etcd};
use crate::etcd_client::{Client, Credentials};
use crate::etcd_tls::Connector;
use crate::file_membership::{Refusal, State};

/// The operator's own ways into etcd, as given; each one not given is FILE's.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The client certificate shown to etcd.
    pub cert: Option<ClientCertificate>,
    /// The user authenticated as.
    pub user: Option<Credentials>,
}

impl Access {
    /// The operator's access from what was given: a certificate with its key, and a user with
    /// its `password` (from `UPCHECK_ETCD_PASSWORD`). Refused, naming the option: a certificate
    /// without its key or a key without its certificate, a user without a password.
    pub fn given(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Access, Refusal> {
        let cert = match (cert, key) {
            (Some(cert), Some(key)) => Some(ClientCertificate { cert, key }),
            (Some(_), None) => {
                return Err(Refusal::Input(
                    "--cert: the client certificate needs its private key: add --key FILE (or \
                     UPCHECK_ETCD_KEY)"
                        .into(),
                ))
            }
            (None, Some(_)) => {
                return Err(Refusal::Input(
                    "--key: the private key needs its client certificate: add --cert FILE (or \
                     UPCHECK_ETCD_CERT)"
                        .into(),
                ))
            }
            (None, None) => None,
        };
        let user = match (user, password) {
            (Some(user), Some(password)) => Some(Credentials { user, password }),
            (Some(user), None) => {
                return Err(Refusal::Input(format!(
                    "--user {user}: its password is read from UPCHECK_ETCD_PASSWORD, which is \
                     not set (never from the command line, where `ps` shows it)"
                )))
            }
            (None, _) => None,
        };
        Ok(Access { cert, user })
    }

    /// A client of FILE's etcd (`etcd`, in `state`), authenticated: over TLS with FILE's CA
    /// and server name when FILE says TLS, showing this access's certificate or else FILE's,
    /// as this access's user or else the plugin configuration's `fleet.user`.
    pub fn client(&self, file: &Path, state: &State, etcd: &Etcd) -> Result<Client, Refusal> {
        let (deployment, _) = state.plan(file)?;
        let fleet = deployment.config.fleet.as_ref();
        let user = self.user.clone().or_else(|| {
            let f = fleet?;
            Some(Credentials {
                user: f.user.clone()?,
                password: f.password.clone()?,
            })
        });
        let tls = match (&etcd.tls, &self.cert) {
            (Some(tls), cert) => {
                let cert = cert.as_ref().or(tls.client.as_ref());
                let connector = Connector::new(&tls.ca, cert, tls.sni.as_deref()).map_err(|e| {
                    Refusal::Input(format!("{}: TLS to its etcd: {e}", file.display()))
                })?;
                Some(connector)
            }
            (None, Some(cert)) => {
                return Err(Refusal::Input(format!(
                    "--cert {}: {} reaches etcd over plain HTTP (written without --etcd-ca), \
                     where a client certificate protects nothing; write it with `upcheck envoy \
                     --etcd-ca` for a fleet on TLS",
                    cert.cert.display(),
                    file.display()
                )))
            }
            (None, None) => None,
        };
        Client::connect(&etcd.members, tls, user.as_ref())
            .map_err(|e| Refusal::Output(e.to_string()))
    }
}
