//! An etcd client of the benches' own (not the fleet module's), with the test cluster's
//! good TLS files.

use std::path::PathBuf;

use crate::etcd::EtcdCluster;

/// Connect to every member of `etcd`.
pub async fn client(etcd: &EtcdCluster) -> etcd_client::Client {
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(etcd.ca())))
        .identity(etcd_client::Identity::from_pem(
            read(etcd.client_cert()),
            read(etcd.client_key()),
        ));
    let opts = etcd_client::ConnectOptions::new().with_tls(tls);
    etcd_client::Client::connect(etcd.endpoints(), Some(opts))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}
