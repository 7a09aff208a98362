//! kubelet's healthz answers from a fake TCP server the test runs on loopback — 200, 500,
//! garbage, an endless answer, a refusal, a hang — read by the healthz client itself (no
//! root, no kubelet). The fake kubelet is also what the kubelet probe's own tests ask.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::HttpUrl;
use super::healthz;
use crate::client::{Error, ErrorKind};

/// How the fake kubelet answers.
#[derive(Clone, Copy)]
pub(crate) enum Healthz {
    /// These bytes, then hang up.
    Says(&'static [u8]),
    /// Megabytes of `x`, then hang up.
    Endless,
    /// Accept and never answer.
    Hangs,
}

/// A fake kubelet on loopback answering every connection `how`; its port.
pub(crate) async fn fake_kubelet(how: Healthz) -> u16 {
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
pub(crate) async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await;
    listener
        .ok()
        .and_then(|l| l.local_addr().ok())
        .map_or(1, |a| a.port())
}

fn url(port: u16) -> HttpUrl {
    HttpUrl {
        host: "127.0.0.1".into(),
        port,
        path: "/healthz".into(),
    }
}

/// Ask the fake kubelet on `port`, giving up after 500 ms (`None`).
async fn ask(port: u16) -> Option<Result<String, Error>> {
    tokio::time::timeout(Duration::from_millis(500), healthz(&url(port)))
        .await
        .ok()
}

#[tokio::test]
async fn ok_is_ok() {
    let r = ask(fake_kubelet(Healthz::Says(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ))
    .await)
    .await;
    assert_eq!(r.map(|r| r.ok()), Some(Some("ok".to_owned())));
    let r = ask(fake_kubelet(Healthz::Says(b"HTTP/1.0 200 OK\r\n\r\n")).await).await;
    assert_eq!(r.map(|r| r.ok()), Some(Some("200".to_owned())));
}

#[tokio::test]
async fn a_500_is_a_failure() {
    let port = fake_kubelet(Healthz::Says(
        b"HTTP/1.1 500 Internal Server Error\r\n\r\n[-]syncloop failed: reason withheld",
    ))
    .await;
    let Some(Err(e)) = ask(port).await else {
        panic!("a 500 was not an error")
    };
    assert_eq!(e.kind(), ErrorKind::Failed);
    assert_eq!(
        e.to_string(),
        format!(
            "{} answered \"HTTP/1.1 500 Internal Server Error\" [-]syncloop failed: reason withheld",
            url(port)
        )
    );
}

#[tokio::test]
async fn garbage_is_a_protocol_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"\x00\xff\xfe not http",
        b"HTTP/1.1",
        b"HTTP/1.1 2000 OK\r\n\r\nok",
        b"SSH-2.0-OpenSSH_9.2\r\n",
    ] {
        let r = ask(fake_kubelet(Healthz::Says(bytes)).await).await;
        let kind = r.and_then(|r| r.err()).map(|e| e.kind());
        assert_eq!(kind, Some(ErrorKind::Protocol), "{bytes:?}");
    }
}

#[tokio::test]
async fn an_endless_answer_is_cut_short() {
    let r = ask(fake_kubelet(Healthz::Endless).await).await;
    let Some(Ok(body)) = r else {
        panic!("an endless 200 was not ok: {r:?}")
    };
    assert_eq!(body, "x".repeat(40));
}

#[tokio::test]
async fn nothing_listening_is_refused() {
    let port = closed_port().await;
    let Some(Err(e)) = ask(port).await else {
        panic!("a closed port answered")
    };
    assert_eq!(e.kind(), ErrorKind::Refused);
    assert!(
        e.to_string()
            .starts_with(&format!("connect to {}: ", url(port))),
        "{e}"
    );
}

#[tokio::test]
async fn a_hang_does_not_answer() {
    assert!(ask(fake_kubelet(Healthz::Hangs).await).await.is_none());
}
