//! Fixture tests of the D-Bus clients without root: real replies of PID 1 (private socket and
//! bus) and of logind and the bus daemon, captured from a test bed by `fixtures/capture.py`
//! (Debian 12: systemd 252.39, dbus-daemon 1.14), read by the peer-to-peer reader; and a fake
//! `/run/systemd/private` served by the test, answering [`Pid1`] with those bytes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use super::p2p::{P2pError, Parsed, message_length, parse_message};
use super::pid1::{Pid1, Route};
use super::{Error, ErrorKind};

const PING: &[u8] = include_bytes!("fixtures/pid1-private-ping.bin");
const VERSION: &[u8] = include_bytes!("fixtures/pid1-private-version.bin");
const GET_UNIT: &[u8] = include_bytes!("fixtures/pid1-private-getunit.bin");
const ACTIVE_STATE: &[u8] = include_bytes!("fixtures/pid1-private-activestate.bin");
const NO_SUCH_UNIT: &[u8] = include_bytes!("fixtures/pid1-private-nosuchunit.bin");
const BUS_HELLO: &[u8] = include_bytes!("fixtures/bus-hello.bin");
const BUS_VERSION: &[u8] = include_bytes!("fixtures/pid1-bus-version.bin");
const LIST_SESSIONS: &[u8] = include_bytes!("fixtures/logind-listsessions.bin");
const SERVICE_UNKNOWN: &[u8] = include_bytes!("fixtures/bus-serviceunknown.bin");

const ALL: [&[u8]; 9] = [
    PING,
    VERSION,
    GET_UNIT,
    ACTIVE_STATE,
    NO_SUCH_UNIT,
    BUS_HELLO,
    BUS_VERSION,
    LIST_SESSIONS,
    SERVICE_UNKNOWN,
];

fn parsed(bytes: &[u8]) -> Parsed {
    let p = parse_message(bytes);
    assert!(p.is_ok(), "fixture does not parse: {p:?}");
    p.unwrap_or_else(|_| unreachable!())
}

#[test]
fn every_fixture_is_one_whole_message() {
    for m in ALL {
        assert!(matches!(message_length(m), Ok(Some(n)) if n == m.len()));
        assert!(parsed(m).reply_serial.is_some());
    }
}

#[test]
fn pid1_private_version_reply() {
    let p = parsed(VERSION);
    assert_eq!((p.kind, p.signature.as_str()), (2, "v"));
    let version = p.into_reply().and_then(|r| r.variant_string());
    assert_eq!(version.ok().as_deref(), Some("252.39-1~deb12u2"));
}

#[test]
fn pid1_bus_version_reply_has_the_same_body() {
    let version = parsed(BUS_VERSION)
        .into_reply()
        .and_then(|r| r.variant_string());
    assert_eq!(version.ok().as_deref(), Some("252.39-1~deb12u2"));
}

#[test]
fn pid1_get_unit_and_active_state_replies() {
    let path = parsed(GET_UNIT).into_reply().and_then(|r| r.string());
    assert_eq!(
        path.ok().as_deref(),
        Some("/org/freedesktop/systemd1/unit/dbus_2eservice")
    );
    let state = parsed(ACTIVE_STATE)
        .into_reply()
        .and_then(|r| r.variant_string());
    assert_eq!(state.ok().as_deref(), Some("active"));
    // Not a string where a variant is expected: a protocol error, not a guess.
    let wrong = parsed(GET_UNIT)
        .into_reply()
        .and_then(|r| r.variant_string());
    assert!(matches!(wrong, Err(P2pError::Protocol(_))));
}

#[test]
fn pid1_no_such_unit_is_a_remote_error_of_kind_failed() {
    match parsed(NO_SUCH_UNIT).into_reply() {
        Err(e @ P2pError::Remote { .. }) => {
            let P2pError::Remote { name, message } = &e else {
                unreachable!()
            };
            assert_eq!(name, "org.freedesktop.systemd1.NoSuchUnit");
            assert!(message.contains("nope.service"));
            assert_eq!(Error::from(e).kind(), ErrorKind::Failed);
        }
        other => panic!("expected NoSuchUnit, got {other:?}"),
    }
}

#[test]
fn logind_list_sessions_reply() {
    let p = parsed(LIST_SESSIONS);
    assert_eq!((p.kind, p.signature.as_str()), (2, "a(susso)"));
    // The array's byte length leads the body: this bed had no sessions.
    assert_eq!(p.body.get(..4), Some(&[0u8, 0, 0, 0][..]));
}

#[test]
fn a_name_nobody_owns_is_not_installed() {
    let p = parsed(SERVICE_UNKNOWN);
    assert_eq!(
        p.error_name.as_deref(),
        Some("org.freedesktop.DBus.Error.ServiceUnknown")
    );
    match p.into_reply() {
        Err(e) => assert_eq!(Error::from(e).kind(), ErrorKind::NotInstalled),
        Ok(r) => panic!("expected an error reply, got {r:?}"),
    }
}

#[test]
fn bus_hello_reply_names_us() {
    let name = parsed(BUS_HELLO).into_reply().and_then(|r| r.string());
    assert!(name.is_ok_and(|n| n.starts_with(":1.")));
}

#[test]
fn truncated_and_corrupted_fixtures_are_errors_not_panics() {
    for m in ALL {
        for n in 0..m.len() {
            if let Ok(p) = parse_message(&m[..n]) {
                if let Ok(r) = p.into_reply() {
                    let _ = r.string();
                    let _ = r.variant_string();
                }
            }
        }
        for i in 0..m.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = m.to_vec();
                bad[i] ^= flip;
                let _ = message_length(&bad);
                if let Ok(p) = parse_message(&bad) {
                    if let Ok(r) = p.into_reply() {
                        let _ = r.string();
                        let _ = r.variant_string();
                    }
                }
            }
        }
    }
}

// ---- a fake /run/systemd/private ----

/// A reply fixture answering the call with `serial` (sd-bus writes `REPLY_SERIAL` first).
fn answering(fixture: &[u8], serial: u32) -> Vec<u8> {
    let mut m = fixture.to_vec();
    assert_eq!(
        &m[16..20],
        &[5, 1, b'u', 0],
        "REPLY_SERIAL is not the first field"
    );
    m[20..24].copy_from_slice(&serial.to_le_bytes());
    m
}

fn socket_path() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "pleg-guard-test-p2p-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Read into `buf` until `pat`, and drop everything up to and including it.
async fn read_until(
    buf: &mut Vec<u8>,
    s: &mut tokio::net::UnixStream,
    pat: &[u8],
) -> std::io::Result<()> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(at) = buf.windows(pat.len()).position(|w| w == pat) {
            buf.drain(..at + pat.len());
            return Ok(());
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Serve one connection: accept `AUTH EXTERNAL`, then answer each incoming call with the next
/// of `script` (its reply serial set to the call's); when the script ends, hang up.
async fn serve(listener: UnixListener, script: Vec<&'static [u8]>) -> std::io::Result<()> {
    let (mut s, _) = listener.accept().await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    read_until(&mut buf, &mut s, b"\r\n").await?;
    s.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
        .await?;
    read_until(&mut buf, &mut s, b"BEGIN\r\n").await?;
    for reply in script {
        let len = loop {
            if let Ok(Some(len)) = message_length(&buf) {
                if buf.len() >= len {
                    break len;
                }
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let call: Vec<u8> = buf.drain(..len).collect();
        let serial = u32::from_le_bytes([call[8], call[9], call[10], call[11]]);
        s.write_all(&answering(reply, serial)).await?;
    }
    Ok(()) // dropping the stream hangs up, as PID 1 does on Reexecute
}

async fn fake_pid1(script: Vec<&'static [u8]>) -> Result<Pid1, Error> {
    let path = socket_path();
    let listener = UnixListener::bind(&path)?;
    tokio::spawn(serve(listener, script));
    let pid1 = Pid1::connect(Route::Private, &path, std::path::Path::new("")).await;
    let _ = std::fs::remove_file(&path);
    pid1
}

#[tokio::test]
async fn pid1_over_a_fake_private_socket_reads_the_captured_replies() {
    let run = async {
        let mut pid1 = fake_pid1(vec![PING, VERSION, GET_UNIT, ACTIVE_STATE]).await?;
        let version = pid1.version().await?;
        let state = pid1.active_state("dbus.service").await?;
        Ok::<_, Error>((version, state))
    };
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), run).await;
    assert!(
        matches!(&got, Ok(Ok((v, s))) if v == "252.39-1~deb12u2" && s == "active"),
        "{got:?}"
    );
}

#[tokio::test]
async fn reexecute_answered_by_a_hang_up_is_a_disconnect() {
    let run = async {
        let mut pid1 = fake_pid1(vec![PING]).await?;
        Ok::<_, Error>(pid1.reexecute().await)
    };
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), run).await;
    assert!(
        matches!(&got, Ok(Ok(Err(e))) if e.kind() == ErrorKind::Disconnected),
        "{got:?}"
    );
}

#[tokio::test]
async fn restart_of_an_unknown_unit_is_an_error_reply() {
    let run = async {
        let mut pid1 = fake_pid1(vec![PING, NO_SUCH_UNIT]).await?;
        Ok::<_, Error>(pid1.restart_unit("nope.service").await)
    };
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), run).await;
    assert!(
        matches!(&got, Ok(Ok(Err(e))) if e.kind() == ErrorKind::Failed
            && e.to_string().starts_with("org.freedesktop.systemd1.NoSuchUnit: ")),
        "{got:?}"
    );
}

#[tokio::test]
async fn no_socket_is_not_installed_and_a_dead_one_is_refused() {
    let path = socket_path();
    let missing = Pid1::connect(Route::Private, &path, std::path::Path::new("")).await;
    assert!(matches!(&missing, Err(e) if e.kind() == ErrorKind::NotInstalled));
    let listener = std::os::unix::net::UnixListener::bind(&path);
    assert!(listener.is_ok());
    drop(listener); // the socket file stays, nobody accepts
    let refused = Pid1::connect(Route::Private, &path, std::path::Path::new("")).await;
    let _ = std::fs::remove_file(&path);
    assert!(matches!(&refused, Err(e) if e.kind() == ErrorKind::Refused));
}
