//! kubelet's healthz answers from a fake TCP server the test runs on loopback — 200, 500,
//! garbage, an endless answer, a refusal, a hang — through the kubelet probe (no root, no
//! kubelet). The healthz client itself still lives in `probe/kubelet.rs` (it was being changed
//! concurrently when the client layer was drawn); when it moves to `client/`, these move
//! beside it. The probe is set up as a container-run kubelet whose docker socket does not
//! exist, so it reads no log and healthz alone decides.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::config::{HttpUrl, KubeletConfig};
use crate::probe::kubelet::KubeletProbe;
use crate::target::{Observation, TargetState};

/// How the fake kubelet answers.
#[derive(Clone, Copy)]
enum Healthz {
    /// These bytes, then hang up.
    Says(&'static [u8]),
    /// Megabytes of `x`, then hang up.
    Endless,
    /// Accept and never answer.
    Hangs,
}

async fn fake_kubelet(how: Healthz) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await;
    let Ok(listener) = listener else {
        panic!("bind loopback: {listener:?}")
    };
    let port = listener.local_addr().map_or(0, |a| a.port());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                match how {
                    Healthz::Says(bytes) => {
                        let _ = s.write_all(bytes).await;
                    }
                    Healthz::Endless => {
                        let chunk = vec![b'x'; 64 * 1024];
                        let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n").await;
                        for _ in 0..32 {
                            if s.write_all(&chunk).await.is_err() {
                                break;
                            }
                        }
                    }
                    Healthz::Hangs => tokio::time::sleep(Duration::from_secs(30)).await,
                }
            });
        }
    });
    port
}

/// A port nothing listens on (bound, then released).
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await;
    listener
        .ok()
        .and_then(|l| l.local_addr().ok())
        .map_or(1, |a| a.port())
}

async fn probe(port: u16) -> Observation {
    let config = KubeletConfig {
        enabled: true,
        unit: "kubelet.service".into(),
        container: Some("pleg-guard-test-no-such-kubelet".into()),
        healthz_url: HttpUrl {
            host: "127.0.0.1".into(),
            port,
            path: "/healthz".into(),
        },
        pleg_log_window: Duration::from_secs(60),
    };
    let mut p = KubeletProbe::new(
        &config,
        PathBuf::from("/nonexistent/pleg-guard-test/docker.sock"),
    );
    p.probe(
        Instant::now() + Duration::from_millis(500),
        Duration::from_millis(400),
    )
    .await
}

#[tokio::test]
async fn ok_is_ok() {
    let o = probe(
        fake_kubelet(Healthz::Says(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ))
        .await,
    )
    .await;
    assert_eq!(o.state, TargetState::Ok, "{}", o.detail);
    assert_eq!(o.detail, "healthz ok");
    assert_eq!(o.facts.healthz_ok, Some(true));
}

#[tokio::test]
async fn a_500_is_an_error() {
    let o = probe(
        fake_kubelet(Healthz::Says(
            b"HTTP/1.1 500 Internal Server Error\r\n\r\n[-]syncloop failed: reason withheld",
        ))
        .await,
    )
    .await;
    assert_eq!(o.state, TargetState::Error, "{}", o.detail);
    assert_eq!(o.facts.healthz_ok, Some(false));
    assert!(o.detail.contains("500"), "{}", o.detail);
}

#[tokio::test]
async fn garbage_is_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"\x00\xff\xfe not http",
        b"HTTP/1.1",
        b"HTTP/1.1 2000 OK\r\n\r\nok",
    ] {
        let o = probe(fake_kubelet(Healthz::Says(bytes)).await).await;
        assert_eq!(o.state, TargetState::Error, "{bytes:?}: {}", o.detail);
    }
}

#[tokio::test]
async fn an_endless_answer_is_cut_short() {
    let o = probe(fake_kubelet(Healthz::Endless).await).await;
    assert!(
        matches!(o.state, TargetState::Ok | TargetState::Slow),
        "{:?} {}",
        o.state,
        o.detail
    );
    assert!(o.detail.len() < 100, "{}", o.detail);
}

#[tokio::test]
async fn refused_without_a_kubelet_is_absent() {
    let o = probe(closed_port().await).await;
    assert_eq!(o.state, TargetState::Absent, "{}", o.detail);
}

#[tokio::test]
async fn a_hang_is_unresponsive() {
    let o = probe(fake_kubelet(Healthz::Hangs).await).await;
    assert_eq!(o.state, TargetState::Unresponsive, "{}", o.detail);
}
