//! The docker client against a fake engine the test serves itself: a unix socket speaking
//! just enough HTTP/1.1 to bollard (`/version`, the list, the inspect), answering canned JSON —
//! docker's real shapes and hostile ones (missing fields, wrong types, null names, huge
//! strings, garbage, a 500, a hang-up). Typed errors, never a panic. No root, no dockerd.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::docker::{Listing, connect, relist};
use super::{Error, ErrorKind};

/// What the fake engine answers to a request path (without the `/v1.xx` prefix and query).
#[derive(Clone)]
enum Answer {
    /// Status and JSON body.
    Json(u16, String),
    /// Raw bytes, then hang up (a broken engine).
    Raw(Vec<u8>),
}

/// The engine's routes: `/containers/json`, `/containers/<id>/json` and
/// `/containers/<id>/logs`; `/version` is built in.
struct Engine {
    list: Answer,
    inspect: Box<dyn Fn(&str) -> Answer + Send + Sync>,
    logs: Answer,
}

fn no_logs() -> Answer {
    Answer::Json(404, r#"{"message":"No such container"}"#.into())
}

const VERSION: &str = r#"{"Version":"20.10.24","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64"}"#;

fn socket_path() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "pleg-guard-test-docker-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn respond(answer: &Answer) -> Vec<u8> {
    match answer {
        Answer::Json(status, body) => {
            let mut out = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            out.extend_from_slice(body.as_bytes());
            out
        }
        Answer::Raw(bytes) => bytes.clone(),
    }
}

async fn serve_one(mut s: UnixStream, engine: Arc<Engine>) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or(target);
    // Strip a `/v1.41` prefix.
    let path = match path.strip_prefix("/v") {
        Some(rest) => rest.find('/').map_or(path, |i| &rest[i..]),
        None => path,
    };
    let answer = if path == "/version" || path == "/_ping" {
        Answer::Json(200, VERSION.into())
    } else if path == "/containers/json" {
        engine.list.clone()
    } else if let Some(id) = path
        .strip_prefix("/containers/")
        .and_then(|p| p.strip_suffix("/json"))
    {
        (engine.inspect)(id)
    } else if path.starts_with("/containers/") && path.ends_with("/logs") {
        engine.logs.clone()
    } else {
        Answer::Json(404, r#"{"message":"page not found"}"#.into())
    };
    s.write_all(&respond(&answer)).await?;
    s.shutdown().await
}

/// Serve `engine` on a fresh socket; returns its path.
fn fake_engine(engine: Engine) -> PathBuf {
    let path = socket_path();
    let listener = UnixListener::bind(&path);
    assert!(listener.is_ok(), "bind {}: {listener:?}", path.display());
    let Ok(listener) = listener else {
        unreachable!()
    };
    let engine = Arc::new(engine);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve_one(s, engine.clone()));
        }
    });
    path
}

fn inspect_status(status: &'static str) -> Box<dyn Fn(&str) -> Answer + Send + Sync> {
    Box::new(move |id| {
        Answer::Json(
            200,
            format!(r#"{{"Id":"{id}","Name":"/x","State":{{"Status":"{status}"}}}}"#),
        )
    })
}

async fn relist_at(engine: Engine) -> Result<Listing, Error> {
    let path = fake_engine(engine);
    let run = async {
        let docker = connect(&path).await?;
        relist(&docker).await
    };
    let got = tokio::time::timeout(Duration::from_secs(10), run).await;
    let _ = std::fs::remove_file(&path);
    match got {
        Ok(r) => r,
        Err(_) => Err(Error::new(ErrorKind::Timeout, "the fake engine test hung")),
    }
}

#[tokio::test]
async fn a_real_listing_counts_the_dead() {
    let list = r#"[
      {"Id":"aaaaaaaaaaaaaaaaaaaaaaaa","Names":["/k8s_app_web-0"],"Image":"busybox","State":"running","Status":"Up 2 hours"},
      {"Id":"bbbbbbbbbbbbbbbbbbbbbbbb","Names":["/k8s_POD_web-1"],"Image":"pause","State":"dead","Status":"Dead"},
      {"Id":"cccccccccccccccccccccccc","Names":["/k8s_app_web-2"],"Image":"busybox","State":"removing","Status":"Removal In Progress"}
    ]"#;
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Json(200, list.into()),
        inspect: Box::new(|id| {
            let status = if id.starts_with('a') {
                "running"
            } else {
                "dead"
            };
            Answer::Json(
                200,
                format!(r#"{{"Id":"{id}","State":{{"Status":"{status}"}}}}"#),
            )
        }),
    })
    .await;
    let Ok(listing) = got else {
        panic!("relist failed: {got:?}")
    };
    assert_eq!(listing.total, 3);
    let dead: Vec<(&str, &str)> = listing
        .dead
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(
        dead,
        [
            ("bbbbbbbbbbbb", "k8s_POD_web-1"),
            ("cccccccccccc", "k8s_app_web-2")
        ]
    );
}

#[tokio::test]
async fn missing_fields_and_null_names_are_no_panic() {
    let list = r#"[
      {},
      {"Id":null,"Names":null,"State":"dead"},
      {"Id":"dddddddddddddddddddd","Names":[],"State":"dead"},
      {"Id":"e","Names":null,"State":"dead"}
    ]"#;
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Json(200, list.into()),
        inspect: inspect_status("dead"),
    })
    .await;
    let Ok(listing) = got else {
        panic!("relist failed: {got:?}")
    };
    assert_eq!(listing.total, 4);
    let dead: Vec<(&str, &str)> = listing
        .dead
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(dead, [("dddddddddddd", ""), ("e", "")]);
}

#[tokio::test]
async fn huge_strings_are_carried_not_choked_on() {
    let name = "n".repeat(1 << 20);
    let list = format!(r#"[{{"Id":"ffffffffffffffff","Names":["/{name}"],"State":"dead"}}]"#);
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Json(200, list),
        inspect: inspect_status("dead"),
    })
    .await;
    assert!(
        matches!(&got, Ok(l) if l.dead.len() == 1 && l.dead[0].name.len() == 1 << 20),
        "{:?}",
        got.as_ref().map(|l| l.total)
    );
}

#[tokio::test]
async fn a_listing_past_its_cap_is_refused_plainly() {
    // Valid JSON just past the 6 MiB cap (many containers), and a listing without an end.
    let one = r#"{"Id":"aaaaaaaaaaaaaaaa","Names":["/k8s_app"],"State":"running"}"#;
    let n =
        usize::try_from(super::docker_transport::LISTING_CAP).unwrap_or(usize::MAX) / one.len() + 1;
    let list = format!("[{}]", vec![one; n].join(","));
    let mut endless = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: 1073741824\r\n\r\n[".to_vec();
    endless.extend(std::iter::repeat_n(b' ', 9 << 20));
    for list in [Answer::Json(200, list), Answer::Raw(endless)] {
        let got = relist_at(Engine {
            logs: no_logs(),
            list,
            inspect: inspect_status("running"),
        })
        .await;
        match got {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
                assert_eq!(e.to_string(), "docker listing larger than 6 MiB: refused");
            }
            Ok(l) => panic!("a listing past the cap was read: {} containers", l.total),
        }
    }
}

#[tokio::test]
async fn an_inspect_past_its_cap_is_refused_too() {
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Json(200, r#"[{"Id":"aaaa","State":"running"}]"#.into()),
        inspect: Box::new(|_| Answer::Json(200, format!(r#"{{"Id":"{}"}}"#, "a".repeat(9 << 20)))),
    })
    .await;
    assert!(
        matches!(&got, Err(e) if e.to_string() == "docker answer larger than 1 MiB: refused"),
        "{:?}",
        got.map(|l| l.total)
    );
}

#[tokio::test]
async fn wrong_types_are_protocol_errors() {
    for list in [
        r#"[{"Id":5,"Names":["/a"],"State":"running"}]"#,
        r#"[{"Id":"a","Names":"/a","State":"running"}]"#,
        r#"{"not":"a list"}"#,
        r#"[{"Id":"a","State":"zombie"}]"#,
    ] {
        let got = relist_at(Engine {
            logs: no_logs(),
            list: Answer::Json(200, list.into()),
            inspect: inspect_status("running"),
        })
        .await;
        match got {
            // An unknown state may be read as "empty" rather than refused: either is fine,
            // as long as nothing is taken for dead.
            Ok(l) => assert!(l.dead.is_empty(), "{list}"),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Protocol, "{list}: {e}"),
        }
    }
}

#[tokio::test]
async fn garbage_json_is_a_protocol_error() {
    for body in ["", "not json", "[{", "\u{0}\u{1}\u{2}"] {
        let got = relist_at(Engine {
            logs: no_logs(),
            list: Answer::Json(200, body.into()),
            inspect: inspect_status("running"),
        })
        .await;
        assert!(
            matches!(&got, Err(e) if e.kind() == ErrorKind::Protocol),
            "{body:?}: {got:?}"
        );
    }
}

#[tokio::test]
async fn an_inspect_with_a_wrong_type_is_a_protocol_error() {
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Json(200, r#"[{"Id":"a","State":"dead"}]"#.into()),
        inspect: Box::new(|_| Answer::Json(200, r#"{"Id":"a","State":{"Status":7}}"#.into())),
    })
    .await;
    assert!(
        matches!(&got, Err(e) if e.kind() == ErrorKind::Protocol),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_server_error_is_failed_with_the_engines_message() {
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Json(500, r#"{"message":"layer does not exist"}"#.into()),
        inspect: inspect_status("running"),
    })
    .await;
    assert!(
        matches!(&got, Err(e) if e.kind() == ErrorKind::Failed
            && e.to_string().contains("layer does not exist")),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_hang_up_mid_answer_is_a_disconnect() {
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Raw(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n[{\"Id\""
                .to_vec(),
        ),
        inspect: inspect_status("running"),
    })
    .await;
    assert!(
        matches!(&got, Err(e) if e.kind() == ErrorKind::Disconnected),
        "{got:?}"
    );
}

#[tokio::test]
async fn not_http_at_all_is_no_panic() {
    let got = relist_at(Engine {
        logs: no_logs(),
        list: Answer::Raw(b"\x00\x01garbage\r\n\r\n".to_vec()),
        inspect: inspect_status("running"),
    })
    .await;
    assert!(
        matches!(&got, Err(e) if e.kind() == ErrorKind::Protocol),
        "{got:?}"
    );
}

#[tokio::test]
async fn no_socket_is_not_installed_and_a_dead_socket_is_refused() {
    let path = socket_path();
    let missing = connect(&path).await;
    assert!(
        matches!(&missing, Err(e) if e.kind() == ErrorKind::NotInstalled),
        "{:?}",
        missing.as_ref().err()
    );
    let listener = std::os::unix::net::UnixListener::bind(&path);
    assert!(listener.is_ok());
    drop(listener);
    let refused = connect(&path).await;
    let _ = std::fs::remove_file(&path);
    assert!(
        matches!(&refused, Err(e) if e.kind() == ErrorKind::Refused),
        "{:?}",
        refused.as_ref().err()
    );
}

/// docker's log frames split lines anywhere (here: inside the marker, and a line spread over
/// three frames interleaved with stderr): the container-log reader still finds the line.
#[test]
fn a_log_line_split_across_docker_log_frames_is_matched() {
    use super::docker::LogScan;
    use super::kubelet_log::is_pleg_complaint;
    use bollard::container::LogOutput;
    const OLD: &str = "I1105 09:50:27.583544  548093 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: pleg was last seen active 58h29m3.043779855s ago; threshold is 3m0s]";
    const NEW: &str = r#"I1105 09:50:27.583544     123 kubelet.go:2412] "Skipping pod synchronization" err="[PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]""#;
    let out = |s: &str| LogOutput::StdOut {
        message: s.as_bytes().to_vec().into(),
    };
    let err = |s: &str| LogOutput::StdErr {
        message: s.as_bytes().to_vec().into(),
    };
    let i = NEW.find("PLEG is").unwrap_or(0) + 4;
    for frames in [
        vec![
            out("I1105 starting\n"),
            out(&NEW[..i]),
            out(&NEW[i..]),
            out("\n"),
        ],
        vec![
            err(&OLD[..10]),
            out(&NEW[..20]),
            err(&OLD[10..]),
            out(&NEW[20..i]),
            err("\n"),
            out(&format!("{}\nI1105 other\n", &NEW[i..])),
        ],
        // No final newline: the stream ended mid-line.
        vec![out(&NEW[..i]), out(&NEW[i..])],
    ] {
        let mut scan = LogScan::new(is_pleg_complaint);
        for f in &frames {
            scan.push(f);
        }
        assert_eq!(scan.finish().as_deref(), Some(NEW), "{frames:?}");
    }
    // Each half alone holds no marker: a per-frame search would miss it.
    for half in [&NEW[..i], &NEW[i..]] {
        let mut scan = LogScan::new(is_pleg_complaint);
        scan.push(&out(half));
        assert_eq!(scan.finish(), None);
    }
    // A TTY container's console stream, split in every possible place.
    for cut in 0..=OLD.len() {
        let mut scan = LogScan::new(is_pleg_complaint);
        scan.push(&LogOutput::Console {
            message: OLD.as_bytes()[..cut].to_vec().into(),
        });
        scan.push(&LogOutput::Console {
            message: [&OLD.as_bytes()[cut..], b"\r\n"].concat().into(),
        });
        assert_eq!(scan.finish().as_deref(), Some(OLD), "cut at {cut}");
    }
}

/// One frame of docker's multiplexed log stream (stream 1 stdout, 2 stderr).
fn frame(stream: u8, bytes: &[u8]) -> Vec<u8> {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    let mut out = vec![stream, 0, 0, 0];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

async fn last_log_line_at(logs: Answer) -> Result<Option<String>, Error> {
    let path = fake_engine(Engine {
        list: Answer::Json(200, "[]".into()),
        inspect: inspect_status("running"),
        logs,
    });
    let run = async {
        let docker = connect(&path).await?;
        super::docker::last_log_line(
            &docker,
            "kubelet",
            std::time::SystemTime::now(),
            super::kubelet_log::is_pleg_complaint,
        )
        .await
    };
    let got = tokio::time::timeout(Duration::from_secs(10), run).await;
    let _ = std::fs::remove_file(&path);
    match got {
        Ok(r) => r,
        Err(_) => Err(Error::new(ErrorKind::Timeout, "the fake engine test hung")),
    }
}

/// A container-run kubelet's log, as the engine streams it: frames that cut lines anywhere,
/// stdout and stderr interleaved, invalid UTF-8; the newest PLEG line is found. A missing
/// container is the engine's error, not a panic.
#[tokio::test]
async fn the_newest_pleg_line_of_a_container_log_is_found() {
    const NEW: &str = r#"I1105 09:50:31.000000  548093 kubelet.go:2412] "Skipping pod synchronization" err="[PLEG is not healthy: pleg was last seen active 3m45.252087921s ago; threshold is 3m0s]""#;
    let old = b"I1105 09:50:27.583544  548093 kubelet.go:1829] skipping pod synchronization - [PLEG is not healthy: \xff\xfe]\n";
    let probe = br#"I1105 09:50:32.000000  548093 prober.go:107] "Probe failed" probeType="Liveness" pod="tenant/evil" podUID="0c0a" containerName="c" probeResult="failure" output="PLEG is not healthy: forged""#;
    let mut body = frame(2, &old[..30]);
    body.extend(frame(1, b"I1105 other\n"));
    body.extend(frame(2, &old[30..]));
    body.extend(frame(1, &NEW.as_bytes()[..60]));
    body.extend(frame(1, &NEW.as_bytes()[60..]));
    body.extend(frame(1, b"\nI1105 after\n"));
    // A pod's probe output quoting the PLEG text, after kubelet's own line: not a match.
    body.extend(frame(2, probe));
    body.extend(frame(2, b"\n"));
    let mut http = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nApi-Version: 1.41\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    http.extend(body);
    let got = last_log_line_at(Answer::Raw(http)).await;
    assert_eq!(got.ok().flatten().as_deref(), Some(NEW));

    let missing = last_log_line_at(no_logs()).await;
    let Err(e) = missing else {
        panic!("a missing container had a log: {missing:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Failed, "{e}");
}
