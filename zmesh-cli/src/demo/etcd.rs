//! A one-member etcd on 127.0.0.1: where its binary is found and its command line.
//! `zmesh demo --etcd` runs one; the etcd tests (zmesh-cli/tests/common/etcd.rs, which
//! include this file) run theirs the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The etcd binary `ZMESH_ETCD` names, else `etcd` on PATH; `None` if there is neither.
pub fn etcd_on_hand() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ZMESH_ETCD") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new("sh")
        .args(["-c", "command -v etcd"])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !p.is_empty()).then(|| PathBuf::from(p))
}

/// `binary` as `name`, the one member of its own cluster: its data in `data_dir`, serving
/// clients at `client_url` (`http://127.0.0.1:PORT`, or `https://` with the TLS flags the
/// caller adds), its peer URL on 127.0.0.1 port `peer`. The caller sets the standard streams
/// and spawns it.
pub fn one_member(
    binary: &Path,
    name: &str,
    data_dir: &Path,
    client_url: &str,
    peer: u16,
) -> Command {
    let peer = format!("http://127.0.0.1:{peer}");
    let mut cmd = Command::new(binary);
    cmd.args(["--name", name, "--data-dir"])
        .arg(data_dir)
        .args([
            "--listen-client-urls",
            client_url,
            "--advertise-client-urls",
            client_url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .arg("--initial-cluster")
        .arg(format!("{name}={peer}"));
    cmd
}
