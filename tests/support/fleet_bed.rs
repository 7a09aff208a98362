//! A bed that reaches the harness's etcd cluster (`etcd.rs`): the beds run on private networks,
//! so each etcd client port is carried into a bed by two socat processes — one on the host
//! listening on a unix socket and connecting to the member, one in the bed's network namespace
//! listening on the same loopback port (so the server certificate's 127.0.0.1 still matches)
//! and connecting to that unix socket. Used by tests/fleet_beds.rs and benches/field.rs.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Bed;
use super::etcd::EtcdCluster;

/// The socat processes of one bed's bridge; killed on drop.
pub struct Bridge(Vec<Child>);

impl Drop for Bridge {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn port_of(endpoint: &str) -> u16 {
    endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {endpoint}"))
}

/// Carry every etcd client port into `bed`'s network namespace.
pub fn bridge(bed: &Bed, etcd: &EtcdCluster) -> Bridge {
    let mut children = Vec::new();
    for (i, e) in etcd.endpoints().iter().enumerate() {
        let port = port_of(e);
        let sock = etcd.dir().join(format!("{}-{i}.sock", bed.name));
        let _ = std::fs::remove_file(&sock);
        children.push(
            Command::new("socat")
                .arg(format!("UNIX-LISTEN:{},fork", sock.display()))
                .arg(format!("TCP:127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                // a member killed on purpose makes every bridged connect to it complain
                .stderr(Stdio::null())
                .spawn()
                .expect("socat on the host"),
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sock.exists() {
            assert!(
                Instant::now() < deadline,
                "socat made no {}",
                sock.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        children.push(
            Command::new("nsenter")
                .args(["-t", &bed.host_pid1().to_string(), "-n", "--", "socat"])
                .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"))
                .arg(format!("UNIX-CONNECT:{}", sock.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                // a member killed on purpose makes every bridged connect to it complain
                .stderr(Stdio::null())
                .spawn()
                .expect("socat in the bed's network namespace"),
        );
    }
    Bridge(children)
}

/// The `[fleet]` table for `node` in `group` (one slot, TLS with the files
/// [`give_certificates`] writes).
pub fn fleet_toml(etcd: &EtcdCluster, group: &str, node: &str) -> String {
    let endpoints: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|e| format!("\"{e}\""))
        .collect();
    format!(
        r#"[fleet]
etcd_endpoints = [{}]
group = "{group}"
node = "{node}"
max_disruptive = "1"
lease_ttl = "10s"
ca_file = "/etc/pleg-guard/etcd/ca.pem"
cert_file = "/etc/pleg-guard/etcd/client.pem"
key_file = "/etc/pleg-guard/etcd/client-key.pem"
"#,
        endpoints.join(", ")
    )
}

/// The cluster's CA and client certificate, where [`fleet_toml`] names them.
pub fn give_certificates(bed: &Bed, etcd: &EtcdCluster) {
    for (from, to) in [
        (etcd.ca(), "/etc/pleg-guard/etcd/ca.pem"),
        (etcd.client_cert(), "/etc/pleg-guard/etcd/client.pem"),
        (etcd.client_key(), "/etc/pleg-guard/etcd/client-key.pem"),
    ] {
        bed.write_file(
            to,
            std::fs::read(&from).expect("a harness certificate file"),
        );
    }
}
