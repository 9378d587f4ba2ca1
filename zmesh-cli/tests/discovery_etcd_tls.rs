//! The etcd v3 store over TLS and with etcd's authentication (MISSION H1), against a real etcd
//! that each test starts itself (`zmesh-cli/tests/common/etcd.rs`) with throwaway
//! certificates: the right CA and client certificate keep the store's contract; a wrong CA,
//! an expired server certificate, an untrusted client certificate and a wrong password are
//! each refused with a typed error that says which; TLS and authentication as an operator
//! configures them in `[discovery.tls]` and `[discovery.auth]`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "common/etcd.rs"]
mod etcd;

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, Permission, TlsOptions};
use zmesh::config::{DiscoveryConfig, EtcdAuthConfig, EtcdTlsConfig, NodeConfig};
use zmesh::runtime::store::{
    self, Change, EtcdOptions, EtcdStore, EtcdTls, ReloadReason, RenewOutcome, Secret, Store,
    StoreError, TlsFailure, WatchEvent,
};
use zmesh::runtime::Node;

use common::desc;
use etcd::{block, next, Etcd, ServerTls, BOUND, TTL};

/// Throwaway certificates of one test, as PEM files in a directory of their own.
struct Pki {
    dir: tempfile::TempDir,
}

/// A CA of a [`Pki`], which signs leaf certificates.
type Ca = rcgen::CertifiedIssuer<'static, rcgen::KeyPair>;

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix(&format!("zmesh-pki-{name}-"))
            .tempdir()
            .expect("pki dir");
        Pki { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).expect("pem file")
    }

    /// A CA, its certificate written to `{name}.pem`.
    fn ca(&self, name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("zmesh test {name}"));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("key");
        let ca = rcgen::CertifiedIssuer::self_signed(params, key).expect("CA");
        std::fs::write(self.path(&format!("{name}.pem")), ca.pem()).expect("write CA");
        ca
    }

    /// A certificate for 127.0.0.1 signed by `ca`, for servers and clients alike, written to
    /// `{name}.pem` and its key to `{name}-key.pem`; `expired`: valid in 2020 only.
    fn leaf(&self, name: &str, ca: &Ca, expired: bool) {
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, ca).expect("sign");
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).expect("write cert");
        std::fs::write(self.path(&format!("{name}-key.pem")), key.serialize_pem())
            .expect("write key");
    }

    /// The server side: certificate `{server}`, client certificates signed by `client_ca`.
    fn server(&self, server: &str, client_ca: &str) -> ServerTls {
        ServerTls {
            cert: self.path(&format!("{server}.pem")),
            key: self.path(&format!("{server}-key.pem")),
            client_ca: self.path(&format!("{client_ca}.pem")),
        }
    }

    /// The store's TLS: trusting `ca`, presenting the client certificate `client`.
    fn store_tls(&self, ca: &str, client: Option<&str>) -> EtcdTls {
        let tls = EtcdTls::new(self.read(&format!("{ca}.pem")));
        match client {
            Some(c) => tls.with_client_certificate(
                self.read(&format!("{c}.pem")),
                Secret::new(self.read(&format!("{c}-key.pem"))),
            ),
            None => tls,
        }
    }

    /// The tests' own client's TLS: trusting `ca`, presenting the client certificate `client`.
    fn admin(&self, ca: &str, client: &str) -> ConnectOptions {
        ConnectOptions::new().with_tls(
            TlsOptions::new()
                .ca_certificate(Certificate::from_pem(self.read(&format!("{ca}.pem"))))
                .identity(Identity::from_pem(
                    self.read(&format!("{client}.pem")),
                    self.read(&format!("{client}-key.pem")),
                ))
                .domain_name("127.0.0.1"),
        )
    }
}

/// A PKI with the CA `ca` (server and client certificates `server`, `client`, `admin`), and
/// another CA `other-ca` that signed nothing etcd trusts.
fn pki(name: &str) -> Pki {
    let pki = Pki::new(name);
    let ca = pki.ca("ca");
    for leaf in ["server", "client", "admin"] {
        pki.leaf(leaf, &ca, false);
    }
    let other = pki.ca("other-ca");
    pki.leaf("stranger", &other, false);
    pki
}

/// A [`pki`] and an etcd serving TLS with its `server` certificate, requiring client
/// certificates signed by its `ca` (the tests' own client presents `admin`), both named
/// `name`.
fn tls_etcd(name: &str) -> (Pki, Etcd) {
    let pki = pki(name);
    let etcd = Etcd::start_tls(name, pki.server("server", "ca"), pki.admin("ca", "admin"));
    (pki, etcd)
}

fn tls_store(etcd: &Etcd, prefix: &str, tls: EtcdTls) -> EtcdStore {
    EtcdStore::with_options(
        vec![etcd.host()],
        prefix.into(),
        EtcdOptions::new().with_tls(tls),
    )
}

/// MISSION H1: over TLS, with the right CA and a client certificate etcd trusts, the store
/// keeps its contract (put, list, renew, watch, remove); and a node whose `[discovery.tls]`
/// names its files relative to its configuration file publishes its descriptor and finds
/// another node's.
#[tokio::test]
async fn h1_etcd_tls_connects_with_the_right_ca_and_client_certificate() {
    let (pki, etcd) = tls_etcd("tls-ok");
    let store = tls_store(&etcd, "/tls/", pki.store_tls("ca", Some("client")));
    let lease = store.put(&desc("b", 7), TTL).await.expect("put over TLS");
    let listed = store.list().await.expect("list over TLS");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].descriptor, desc("b", 7));
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    let mut w = store.watch().expect("watch");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Reload {
            descriptors: vec![desc("b", 7)],
            reason: ReloadReason::Initial
        }
    );
    store.put(&desc("c", 8), TTL).await.expect("put c");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Put(desc("c", 8))])
    );
    store.remove(&lease).await.expect("remove");

    // Two nodes configured by files: relative paths resolve against the file's directory.
    let url = format!("etcd://{}/tls-nodes", etcd.host());
    let mut nodes = Vec::new();
    for rid in ["a", "b"] {
        let text = format!(
            "rid = \"{rid}\"\nmemberships = [{{ role = \"server\", channel = \"orders\" }}]\n\
             [discovery]\nstore = \"{url}\"\n\
             [discovery.tls]\nca_file = \"ca.pem\"\ncert_file = \"client.pem\"\n\
             key_file = \"client-key.pem\"\n[security]\nmode = \"none\"\n"
        );
        let file = pki.path(&format!("{rid}.toml"));
        std::fs::write(&file, text).expect("config file");
        let config = NodeConfig::from_file(&file).expect("config");
        let tls = config
            .discovery
            .as_ref()
            .and_then(|d| d.tls.clone())
            .expect("tls");
        assert_eq!(tls.ca_file, pki.path("ca.pem"));
        nodes.push(Node::start(config).await.expect("node"));
    }
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let s = nodes[0].snapshot().await.expect("snapshot");
        let d = s.discovery.clone().expect("discovery");
        if d.descriptors_seen == 1 && d.lease.as_str() == "held" && d.store_reachable {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", s.to_table());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in nodes {
        n.shutdown().await.expect("shutdown");
    }
}

/// MISSION H1: a CA that did not sign etcd's certificate is refused with a typed error that
/// says so, not a bare "unavailable"; the watch reports the same error.
#[tokio::test]
async fn h1_etcd_tls_refuses_a_wrong_ca() {
    let (pki, etcd) = tls_etcd("tls-ca");
    let store = tls_store(&etcd, "/tls/", pki.store_tls("other-ca", Some("client")));
    let err = store.list().await.expect_err("a wrong CA is refused");
    assert_eq!(
        err,
        StoreError::Tls {
            endpoint: etcd.host(),
            failure: TlsFailure::UnknownIssuer
        }
    );
    assert!(
        err.to_string().contains("not signed by the configured CA"),
        "{err}"
    );
    let mut w = store.watch().expect("watch");
    assert_eq!(next(&mut w).await, WatchEvent::Unreachable(err));
}

/// MISSION H1: etcd's own certificate expired: refused, and the error says it expired.
#[tokio::test]
async fn h1_etcd_tls_refuses_an_expired_server_certificate() {
    let pki = pki("tls-expired");
    let ca_again = pki.ca("ca2");
    pki.leaf("old-server", &ca_again, true);
    pki.leaf("admin2", &ca_again, false);
    let etcd = Etcd::start_with("tls-expired", Some(pki.server("old-server", "ca2")), None);
    let store = tls_store(&etcd, "/tls/", pki.store_tls("ca2", Some("admin2")));
    // etcd's port accepts before etcd serves: until it does, the store finds it unavailable.
    let deadline = tokio::time::Instant::now() + BOUND;
    let err = loop {
        match store.list().await {
            Err(StoreError::Unavailable(e)) => {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other.expect_err("an expired certificate is refused"),
        }
    };
    assert_eq!(
        err,
        StoreError::Tls {
            endpoint: etcd.host(),
            failure: TlsFailure::Expired
        }
    );
    assert!(err.to_string().contains("expired"), "{err}");
}

/// MISSION H1: etcd requires a client certificate; one signed by a CA etcd does not trust is
/// refused, and the error says that etcd refused this node's certificate.
#[tokio::test]
async fn h1_etcd_tls_refuses_a_client_certificate_etcd_does_not_trust() {
    let (pki, etcd) = tls_etcd("tls-client");
    let store = tls_store(&etcd, "/tls/", pki.store_tls("ca", Some("stranger")));
    let err = store.list().await.expect_err("refused");
    assert!(
        matches!(
            &err,
            StoreError::Tls {
                failure: TlsFailure::ClientCertificateRefused(_),
                ..
            }
        ),
        "{err:?}"
    );
}

/// Turns on etcd's authentication: `root` (password `root-pw`), and `zmesh` (password
/// `zmesh-pw`) with read-write on the keys under `prefix` only.
fn enable_auth(etcd: &Etcd, prefix: &str) {
    block(async {
        let mut c = etcd.admin_client().await?;
        c.user_add("root", "root-pw", None).await?;
        // etcd may hold the root role already; granting it is what matters.
        let _ = c.role_add("root").await;
        c.user_grant_role("root", "root").await?;
        c.role_add("zmesh").await?;
        c.role_grant_permission("zmesh", Permission::read_write(prefix).with_prefix())
            .await?;
        c.user_add("zmesh", "zmesh-pw", None).await?;
        c.user_grant_role("zmesh", "zmesh").await?;
        c.auth_enable().await.map(|_| ())
    })
    .expect("auth enabled");
}

fn auth_store(etcd: &Etcd, prefix: &str, credentials: Option<(&str, &str)>) -> EtcdStore {
    let mut options = EtcdOptions::new();
    if let Some((user, password)) = credentials {
        options = options.with_credentials(user, Secret::new(password.to_owned()));
    }
    EtcdStore::with_options(vec![etcd.host()], prefix.into(), options)
}

/// MISSION H1: etcd with authentication on: the right user and password keep the store's
/// contract (put, renew, watch, list, remove); a wrong password, and no credentials at all,
/// are refused with a typed error that says so.
#[tokio::test]
async fn h1_etcd_auth_right_password_works_wrong_password_refused() {
    let etcd = Etcd::start("auth");
    enable_auth(&etcd, "/auth/");
    let store = auth_store(&etcd, "/auth/", Some(("zmesh", "zmesh-pw")));
    let lease = store.put(&desc("b", 7), TTL).await.expect("put as zmesh");
    assert_eq!(store.renew(&lease).await, Ok(RenewOutcome::Renewed));
    let mut w = store.watch().expect("watch");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Reload {
            descriptors: vec![desc("b", 7)],
            reason: ReloadReason::Initial
        }
    );
    let listed = store.list().await.expect("list as zmesh");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].lease_age_ms.is_some(), "{listed:?}");
    store.remove(&lease).await.expect("remove as zmesh");
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Delta(vec![Change::Removed { rid: "b".into() }])
    );

    let wrong = auth_store(&etcd, "/auth/", Some(("zmesh", "not-the-password")));
    let err = wrong.list().await.expect_err("a wrong password is refused");
    let StoreError::Auth { endpoint, detail } = &err else {
        panic!("expected an authentication error, got {err:?}");
    };
    assert_eq!(endpoint, &etcd.host());
    assert!(detail.contains("authentication failed"), "{detail}");
    assert!(!err.to_string().contains("not-the-password"), "{err}");
    let anonymous = auth_store(&etcd, "/auth/", None);
    assert!(
        matches!(anonymous.list().await, Err(StoreError::Auth { .. })),
        "no credentials: refused"
    );
    // The user's permission covers its prefix only.
    let elsewhere = auth_store(&etcd, "/other/", Some(("zmesh", "zmesh-pw")));
    assert!(
        matches!(elsewhere.list().await, Err(StoreError::Auth { .. })),
        "another prefix: permission denied"
    );
}

/// MISSION H1: TLS and authentication together, configured as an operator writes them: the
/// password from a file or from an environment variable, named in `[discovery.auth]`; the
/// wrong password file gives a node whose store is unreachable with the reason, and the
/// node's own lease stays unacquired, while the right one publishes.
#[tokio::test]
async fn h1_etcd_tls_and_auth_from_the_config_file() {
    let (pki, etcd) = tls_etcd("tls-auth");
    enable_auth(&etcd, "/ta/");
    std::fs::write(pki.path("password"), "zmesh-pw\n").expect("password file");
    std::fs::write(pki.path("wrong"), "nope\n").expect("password file");
    let var = "ZMESH_TEST_ETCD_PASSWORD_TLS_AUTH";
    std::env::set_var(var, "zmesh-pw");
    let discovery = |password: &str| {
        let mut d = DiscoveryConfig::new(format!("etcd://{}/ta", etcd.host()));
        d.tls = Some(EtcdTlsConfig::new("ca.pem").client_cert("client.pem", "client-key.pem"));
        d.auth = Some(if password == "env" {
            EtcdAuthConfig::with_password_env("zmesh", var)
        } else {
            EtcdAuthConfig::with_password_file("zmesh", password)
        });
        d.resolve_paths(pki.dir.path());
        d
    };
    for password in ["password", "env"] {
        let store = store::open_config(&discovery(password)).expect("open");
        let lease = store.put(&desc("a", 1), TTL).await.expect("put");
        store.remove(&lease).await.expect("remove");
    }
    let shown = format!("{:?}", store::open_config(&discovery("env")).expect("open"));
    assert!(!shown.contains("zmesh-pw"), "{shown}");
    let err = store::open_config(&discovery("wrong"))
        .expect("open")
        .list()
        .await
        .expect_err("refused");
    assert!(matches!(err, StoreError::Auth { .. }), "{err:?}");
    // Settings that cannot be used fail when the store is opened, that is at start.
    let mut missing = discovery("password");
    missing.auth.as_mut().expect("auth").password_file = Some(pki.path("absent"));
    assert!(matches!(
        store::open_config(&missing),
        Err(StoreError::Settings(_))
    ));

    let mut node = NodeConfig::new("n");
    node.memberships = common::server_of("orders");
    node.discovery = Some(discovery("wrong"));
    let refused = Node::start(node.clone()).await.expect("starts anyway");
    node.rid = "m".into();
    node.discovery = Some(discovery("password"));
    let good = Node::start(node).await.expect("node");
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let bad = refused
            .snapshot()
            .await
            .expect("snapshot")
            .discovery
            .expect("d");
        let ok = good
            .snapshot()
            .await
            .expect("snapshot")
            .discovery
            .expect("d");
        let said = bad.last_store_error.as_ref().map(|(e, _)| e.clone());
        if ok.lease.as_str() == "held"
            && !bad.store_reachable
            && said.as_ref().is_some_and(|e| e.contains("authentication"))
        {
            assert_ne!(bad.lease.as_str(), "held");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "good: {ok:?}\nrefused: {bad:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    refused.shutdown().await.expect("shutdown");
    good.shutdown().await.expect("shutdown");
}
