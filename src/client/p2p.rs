//! A minimal D-Bus client for peer-to-peer connections: what pleg-guard needs to talk to
//! PID 1 over its private socket `/run/systemd/private`, the way root's `systemctl` does.
//!
//! Why not zbus here: on a direct connection sd-bus stamps its messages with the *well-known*
//! sender `org.freedesktop.systemd1`, and zbus rejects any sender that is not a unique name
//! (`:1.42`), so every reply from the private socket fails to parse. The subset needed is
//! small — `AUTH EXTERNAL`, method calls whose arguments are strings, and replies holding a
//! string, an object path or a variant string — so it is written out here, following the
//! D-Bus specification's wire format, and unit-tested against hand-made messages.
//!
//! One quirk of sd-bus shapes [`P2pConnection::connect`]: a message that arrives in the same
//! read as the `BEGIN` line sits in PID 1's buffer until the next bytes arrive on the socket
//! (seen on systemd 252 with strace: the reply is written only when the client hangs up). So
//! the connection is opened with `Peer.Ping`s, one every few milliseconds, until one is
//! answered; every later write then wakes PID 1 as usual.

use std::path::Path;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Largest message accepted (the specification's maximum is 128 MiB; PID 1's replies to our
/// calls are tiny).
const MAX_MESSAGE: usize = 1 << 20;

/// Why a call over a peer-to-peer connection failed.
#[derive(Debug, thiserror::Error)]
pub enum P2pError {
    /// The socket failed, or the peer closed it.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer refused authentication.
    #[error("authentication refused: {0}")]
    Auth(String),
    /// The peer sent something this client does not understand.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The peer answered with a D-Bus error.
    #[error("{name}: {message}")]
    Remote {
        /// The error name, e.g. `org.freedesktop.systemd1.NoSuchUnit`.
        name: String,
        /// The error message.
        message: String,
    },
}

impl P2pError {
    /// What kind of failure this is: a closed socket is a disconnect (what PID 1 does to
    /// answer `Reexecute`), an error reply is told by its D-Bus error name.
    pub fn kind(&self) -> super::ErrorKind {
        match self {
            P2pError::Io(e) => super::io_kind(e).unwrap_or(super::ErrorKind::Failed),
            P2pError::Auth(_) => super::ErrorKind::Failed,
            P2pError::Protocol(_) => super::ErrorKind::Protocol,
            P2pError::Remote { name, .. } => super::bus::kind_of_error_name(name),
        }
    }
}

/// One method call; every argument is a string (signature `s…s`).
#[derive(Debug, Clone)]
pub struct MethodCall<'a> {
    /// Object path.
    pub path: &'a str,
    /// Interface.
    pub interface: &'a str,
    /// Member.
    pub member: &'a str,
    /// String arguments.
    pub args: &'a [&'a str],
}

/// A method's reply: its signature and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The body's signature.
    pub signature: String,
    body: Vec<u8>,
    big_endian: bool,
}

impl Reply {
    /// The reply as a single string or object path (`s` or `o`).
    pub fn string(&self) -> Result<String, P2pError> {
        if self.signature != "s" && self.signature != "o" {
            return Err(P2pError::Protocol(format!(
                "expected a string, got `{}`",
                self.signature
            )));
        }
        Reader::new(&self.body, self.big_endian).string()
    }

    /// The reply as a variant holding a string (`Properties.Get` of a string property).
    pub fn variant_string(&self) -> Result<String, P2pError> {
        if self.signature != "v" {
            return Err(P2pError::Protocol(format!(
                "expected a variant, got `{}`",
                self.signature
            )));
        }
        let mut r = Reader::new(&self.body, self.big_endian);
        let sig = r.signature()?;
        if sig != "s" && sig != "o" {
            return Err(P2pError::Protocol(format!(
                "expected a string variant, got `{sig}`"
            )));
        }
        r.string()
    }
}

impl Reply {
    /// The reply as a variant holding a `u32` (`Properties.Get` of `MainPID`).
    pub fn variant_u32(&self) -> Result<u32, P2pError> {
        self.variant_of("u")?.u32()
    }

    /// The reply as a variant holding a `u64` (`Properties.Get` of a `…Monotonic` timestamp).
    pub fn variant_u64(&self) -> Result<u64, P2pError> {
        self.variant_of("t")?.u64()
    }

    /// A reader at a variant's value, which must have the signature `want`.
    fn variant_of(&self, want: &str) -> Result<Reader<'_>, P2pError> {
        if self.signature != "v" {
            return Err(P2pError::Protocol(format!(
                "expected a variant, got `{}`",
                self.signature
            )));
        }
        let mut r = Reader::new(&self.body, self.big_endian);
        let sig = r.signature()?;
        if sig != want {
            return Err(P2pError::Protocol(format!(
                "expected a `{want}` variant, got `{sig}`"
            )));
        }
        Ok(r)
    }
}

/// An authenticated peer-to-peer connection.
pub struct P2pConnection {
    stream: UnixStream,
    /// Bytes read but not yet consumed (reads are cancel-safe: nothing is lost when a read
    /// is abandoned by a timeout).
    rbuf: Vec<u8>,
    serial: u32,
}

/// How long to wait for a `Ping` answer before sending another one to wake PID 1.
const PING_EVERY: Duration = Duration::from_millis(20);

const PING: MethodCall<'static> = MethodCall {
    path: "/",
    interface: "org.freedesktop.DBus.Peer",
    member: "Ping",
    args: &[],
};

impl P2pConnection {
    /// Connect to `socket`, authenticate as this process's user (`AUTH EXTERNAL`), and ping
    /// until the peer answers. Bound it with a timeout.
    pub async fn connect(socket: &Path) -> Result<Self, P2pError> {
        let stream = UnixStream::connect(socket).await?;
        let mut conn = P2pConnection {
            stream,
            rbuf: Vec::new(),
            serial: 0,
        };
        let uid = nix::unistd::geteuid().as_raw();
        let hex: String = uid
            .to_string()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        conn.stream
            .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())
            .await?;
        let line = conn.read_line().await?;
        if !line.starts_with("OK ") {
            return Err(P2pError::Auth(line.trim().to_owned()));
        }
        conn.stream.write_all(b"BEGIN\r\n").await?;
        let mut pings = Vec::new();
        loop {
            pings.push(conn.send(&PING).await?);
            match tokio::time::timeout(PING_EVERY, conn.read_message()).await {
                Ok(Ok(msg)) => {
                    let parsed = parse_message(&msg)?;
                    if parsed.reply_serial.is_some_and(|s| pings.contains(&s)) {
                        return Ok(conn);
                    }
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {} // not answered yet: ping again, which wakes PID 1
            }
        }
    }

    /// Read one `\r\n`-terminated line of the authentication dialogue.
    async fn read_line(&mut self) -> Result<String, P2pError> {
        loop {
            if let Some(end) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.rbuf.drain(..end + 2).collect();
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            if self.rbuf.len() > 4096 {
                return Err(P2pError::Protocol("authentication line too long".into()));
            }
            self.fill().await?;
        }
    }

    /// Read more bytes into the buffer (cancel-safe).
    async fn fill(&mut self) -> Result<(), P2pError> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(P2pError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        self.rbuf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// Read one whole message (cancel-safe: partial messages stay buffered).
    async fn read_message(&mut self) -> Result<Vec<u8>, P2pError> {
        loop {
            if let Some(len) = message_length(&self.rbuf)? {
                if self.rbuf.len() >= len {
                    return Ok(self.rbuf.drain(..len).collect());
                }
            }
            self.fill().await?;
        }
    }

    /// Send a call; returns its serial.
    async fn send(&mut self, call: &MethodCall<'_>) -> Result<u32, P2pError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        self.stream.write_all(&encode_call(call, serial)).await?;
        Ok(serial)
    }

    /// Call a method and wait for its reply (signals and stale replies in between are
    /// skipped). Bound it with a timeout: a peer that never answers is waited for forever.
    pub async fn call(&mut self, call: &MethodCall<'_>) -> Result<Reply, P2pError> {
        let serial = self.send(call).await?;
        loop {
            let msg = self.read_message().await?;
            let parsed = parse_message(&msg)?;
            if parsed.reply_serial != Some(serial) {
                continue; // a signal, or a reply to an abandoned call
            }
            return parsed.into_reply();
        }
    }
}

/// Encode a method call (little-endian).
fn encode_call(call: &MethodCall<'_>, serial: u32) -> Vec<u8> {
    let signature: String = "s".repeat(call.args.len());
    let mut body = Writer::default();
    for a in call.args {
        body.string(a);
    }
    let mut fields = Writer::default();
    let field = |w: &mut Writer, code: u8, sig: &str, value: &str| {
        w.align(8);
        w.bytes.push(code);
        w.signature(sig);
        if sig == "g" {
            w.signature(value);
        } else {
            w.string(value);
        }
    };
    field(&mut fields, 1, "o", call.path);
    field(&mut fields, 2, "s", call.interface);
    field(&mut fields, 3, "s", call.member);
    if !signature.is_empty() {
        field(&mut fields, 8, "g", &signature);
    }
    let mut out = Vec::with_capacity(64 + fields.bytes.len() + body.bytes.len());
    out.extend_from_slice(&[b'l', 1, 0, 1]);
    out.extend_from_slice(&(body.bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&serial.to_le_bytes());
    out.extend_from_slice(&(fields.bytes.len() as u32).to_le_bytes());
    // Field offsets above were computed as if the array started at offset 0; it starts at 16,
    // which is 8-aligned, so the padding is the same.
    out.extend_from_slice(&fields.bytes);
    while out.len() % 8 != 0 {
        out.push(0);
    }
    out.extend_from_slice(&body.bytes);
    out
}

/// The total length of the message at the start of `buf`, once its fixed header is there.
pub(super) fn message_length(buf: &[u8]) -> Result<Option<usize>, P2pError> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let fixed = &buf[..16];
    let big = match fixed[0] {
        b'l' => false,
        b'B' => true,
        e => return Err(P2pError::Protocol(format!("bad endianness byte {e:#x}"))),
    };
    check_version(fixed[3])?;
    let u32_at = |i: usize| {
        let b = [fixed[i], fixed[i + 1], fixed[i + 2], fixed[i + 3]];
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let body_len = u32_at(4) as usize;
    let fields_len = u32_at(12) as usize;
    let header_len = (16 + fields_len).div_ceil(8) * 8;
    let total = header_len
        .checked_add(body_len)
        .filter(|t| *t <= MAX_MESSAGE)
        .ok_or_else(|| P2pError::Protocol("message too large".into()))?;
    Ok(Some(total))
}

/// The major protocol version byte must be 1 (the only one the specification defines).
fn check_version(v: u8) -> Result<(), P2pError> {
    if v == 1 {
        Ok(())
    } else {
        Err(P2pError::Protocol(format!("protocol version {v}, not 1")))
    }
}

/// The parts of a message this client looks at.
#[derive(Debug)]
pub(super) struct Parsed {
    pub(super) kind: u8,
    pub(super) big_endian: bool,
    pub(super) reply_serial: Option<u32>,
    pub(super) error_name: Option<String>,
    pub(super) signature: String,
    pub(super) body: Vec<u8>,
}

impl Parsed {
    /// The message as the answer to a call: a method return is a [`Reply`], an error reply
    /// is [`P2pError::Remote`], anything else is a protocol error.
    pub(super) fn into_reply(self) -> Result<Reply, P2pError> {
        match self.kind {
            2 => Ok(Reply {
                signature: self.signature,
                body: self.body,
                big_endian: self.big_endian,
            }),
            3 => {
                let message = if self.signature.starts_with('s') {
                    Reader::new(&self.body, self.big_endian)
                        .string()
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                Err(P2pError::Remote {
                    name: self.error_name.unwrap_or_else(|| "unknown error".into()),
                    message,
                })
            }
            k => Err(P2pError::Protocol(format!(
                "unexpected message type {k} as reply"
            ))),
        }
    }
}

/// The fuzz target's way in (`fuzz/`, feature `fuzzing`): `data` as a byte stream from the
/// socket, cut into messages as [`Connection::call`] does, each parsed and read as a reply.
#[cfg(feature = "fuzzing")]
pub fn fuzz_message(data: &[u8]) {
    let mut buf = data.to_vec();
    while let Ok(Some(len)) = message_length(&buf) {
        if buf.len() < len || len == 0 {
            break;
        }
        let msg: Vec<u8> = buf.drain(..len).collect();
        if let Ok(parsed) = parse_message(&msg) {
            if let Ok(reply) = parsed.into_reply() {
                let _ = reply.string();
                let _ = reply.variant_string();
            }
        }
    }
    if let Ok(parsed) = parse_message(data) {
        let _ = parsed
            .into_reply()
            .map(|r| (r.string(), r.variant_string()));
    }
}

pub(super) fn parse_message(msg: &[u8]) -> Result<Parsed, P2pError> {
    let short = || P2pError::Protocol("truncated message".into());
    if msg.len() < 16 {
        return Err(short());
    }
    let big = match msg[0] {
        b'l' => false,
        b'B' => true,
        e => return Err(P2pError::Protocol(format!("bad endianness byte {e:#x}"))),
    };
    check_version(msg[3])?;
    let kind = msg[1];
    let mut r = Reader::new(msg, big);
    r.pos = 4;
    let body_len = r.u32()? as usize;
    r.pos = 12;
    let fields_len = r.u32()? as usize;
    let fields_end = 16usize
        .checked_add(fields_len)
        .filter(|e| *e <= msg.len())
        .ok_or_else(short)?;
    // Header fields are read from the header-field array alone: a field that claims to run
    // past its end is a truncated message, not a read into the body.
    let mut r = Reader::new(&msg[..fields_end], big);
    r.pos = 16;
    let mut reply_serial = None;
    let mut error_name = None;
    let mut signature = String::new();
    while r.pos < fields_end {
        let next = r.pos.div_ceil(8) * 8;
        if next >= fields_end {
            break;
        }
        r.pos = next;
        let code = r.byte()?;
        let sig = r.signature()?;
        match sig.as_str() {
            "s" | "o" => {
                let v = r.string()?;
                if code == 4 {
                    error_name = Some(v);
                }
            }
            "g" => {
                let v = r.signature()?;
                if code == 8 {
                    signature = v;
                }
            }
            "u" | "h" => {
                let v = r.u32()?;
                if code == 5 {
                    reply_serial = Some(v);
                }
            }
            other => {
                return Err(P2pError::Protocol(format!(
                    "unexpected header field type `{other}`"
                )));
            }
        }
    }
    let body_start = fields_end.div_ceil(8) * 8;
    let body_end = body_start.checked_add(body_len).ok_or_else(short)?;
    if body_end != msg.len() {
        return Err(P2pError::Protocol(format!(
            "body length {body_len} does not match the message ({} bytes after the header)",
            msg.len().saturating_sub(body_start)
        )));
    }
    let body = msg.get(body_start..body_end).ok_or_else(short)?.to_vec();
    Ok(Parsed {
        kind,
        big_endian: big,
        reply_serial,
        error_name,
        signature,
        body,
    })
}

/// Marshals the few types the calls need, aligned relative to the start of the buffer.
#[derive(Default)]
struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    fn align(&mut self, n: usize) {
        while self.bytes.len() % n != 0 {
            self.bytes.push(0);
        }
    }

    fn string(&mut self, s: &str) {
        self.align(4);
        self.bytes
            .extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.push(0);
    }

    fn signature(&mut self, s: &str) {
        self.bytes.push(s.len() as u8);
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.push(0);
    }
}

/// Reads the few types replies hold, aligned relative to the start of its buffer.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], big: bool) -> Self {
        Reader { buf, pos: 0, big }
    }

    fn short(&self) -> P2pError {
        P2pError::Protocol("truncated message".into())
    }

    fn align(&mut self, n: usize) -> Result<(), P2pError> {
        let to = self.pos.div_ceil(n) * n;
        if to > self.buf.len() {
            return Err(self.short());
        }
        self.pos = to;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], P2pError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| self.short())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, P2pError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, P2pError> {
        self.align(4)?;
        let b = self.take(4)?;
        let b = [b[0], b[1], b[2], b[3]];
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64, P2pError> {
        self.align(8)?;
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(if self.big {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        })
    }

    fn string(&mut self) -> Result<String, P2pError> {
        let len = self.u32()? as usize;
        let s = self.take(len)?;
        self.take(1)?; // the terminating NUL
        String::from_utf8(s.to_vec()).map_err(|_| P2pError::Protocol("string is not UTF-8".into()))
    }

    fn signature(&mut self) -> Result<String, P2pError> {
        let len = self.byte()? as usize;
        let s = self.take(len)?;
        self.take(1)?;
        String::from_utf8(s.to_vec())
            .map_err(|_| P2pError::Protocol("signature is not ASCII".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a reply the way sd-bus does on a direct connection: with the well-known sender
    /// that zbus refuses.
    fn reply(kind: u8, reply_serial: u32, error: Option<&str>, sig: &str, body: &[u8]) -> Vec<u8> {
        let mut f = Writer::default();
        let field = |w: &mut Writer, code: u8, s: &str, v: &str| {
            w.align(8);
            w.bytes.push(code);
            w.signature(s);
            if s == "g" {
                w.signature(v)
            } else {
                w.string(v)
            }
        };
        if let Some(e) = error {
            field(&mut f, 4, "s", e);
        }
        f.align(8);
        f.bytes.push(5);
        f.signature("u");
        f.align(4);
        f.bytes.extend_from_slice(&reply_serial.to_le_bytes());
        field(&mut f, 7, "s", "org.freedesktop.systemd1");
        if !sig.is_empty() {
            field(&mut f, 8, "g", sig);
        }
        let mut out = vec![b'l', kind, 1, 1];
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&77u32.to_le_bytes());
        out.extend_from_slice(&(f.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&f.bytes);
        while out.len() % 8 != 0 {
            out.push(0);
        }
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn encodes_a_properties_get_call() {
        let call = MethodCall {
            path: "/org/freedesktop/systemd1",
            interface: "org.freedesktop.DBus.Properties",
            member: "Get",
            args: &["org.freedesktop.systemd1.Manager", "Version"],
        };
        let m = encode_call(&call, 7);
        assert_eq!(&m[..4], &[b'l', 1, 0, 1]);
        let p = parse_message(&m).unwrap();
        assert_eq!(p.kind, 1);
        assert_eq!(p.signature, "ss");
        let mut r = Reader::new(&p.body, false);
        assert_eq!(r.string().unwrap(), "org.freedesktop.systemd1.Manager");
        assert_eq!(r.string().unwrap(), "Version");
        let body_len = u32::from_le_bytes([m[4], m[5], m[6], m[7]]) as usize;
        assert_eq!(body_len, p.body.len());
        assert_eq!(m.len() % 8, body_len % 8);
    }

    #[test]
    fn parses_a_variant_string_reply_with_a_well_known_sender() {
        let mut body = Writer::default();
        body.signature("s");
        body.string("252.38-1~deb12u1");
        let m = reply(2, 7, None, "v", &body.bytes);
        let p = parse_message(&m).unwrap();
        assert_eq!((p.kind, p.reply_serial), (2, Some(7)));
        let r = Reply {
            signature: p.signature,
            body: p.body,
            big_endian: false,
        };
        assert_eq!(r.variant_string().unwrap(), "252.38-1~deb12u1");
        assert!(r.string().is_err());
    }

    #[test]
    fn parses_variant_integers_aligned_as_sd_bus_sends_them() {
        let reply_of = |sig: &str, value: &[u8]| {
            let mut body = Writer::default();
            body.signature(sig);
            body.align(value.len());
            body.bytes.extend_from_slice(value);
            let p = parse_message(&reply(2, 7, None, "v", &body.bytes)).unwrap();
            Reply {
                signature: p.signature,
                body: p.body,
                big_endian: false,
            }
        };
        let pid = reply_of("u", &4242u32.to_le_bytes());
        assert_eq!(pid.variant_u32().unwrap(), 4242);
        assert!(pid.variant_u64().is_err() && pid.variant_string().is_err());
        let t = reply_of("t", &1_234_567_890_123u64.to_le_bytes());
        assert_eq!(t.variant_u64().unwrap(), 1_234_567_890_123);
        assert!(t.variant_u32().is_err());
        // truncated: an error, not a panic
        let short = Reply {
            signature: "v".into(),
            body: vec![1, b't', 0, 0, 0, 0, 0, 0, 1, 2],
            big_endian: false,
        };
        assert!(short.variant_u64().is_err());
    }

    #[test]
    fn parses_an_error_reply() {
        let mut body = Writer::default();
        body.string("Unit nope.service not loaded.");
        let m = reply(
            3,
            9,
            Some("org.freedesktop.systemd1.NoSuchUnit"),
            "s",
            &body.bytes,
        );
        let p = parse_message(&m).unwrap();
        assert_eq!(p.kind, 3);
        assert_eq!(
            p.error_name.as_deref(),
            Some("org.freedesktop.systemd1.NoSuchUnit")
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            vec![],
            vec![b'l'; 15],
            vec![b'l', 2, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 255, 255, 255, 255],
        ] {
            assert!(parse_message(&bytes).is_err());
        }
        let mut m = reply(2, 1, None, "s", &[]);
        m.truncate(m.len() - 3);
        assert!(
            parse_message(&m).is_err()
                || Reply {
                    signature: "s".into(),
                    body: vec![],
                    big_endian: false
                }
                .string()
                .is_err()
        );
        assert!(Reader::new(&[5, 0, 0, 0, b'a'], false).string().is_err());
    }

    /// The header-field array claims 8 bytes, but its one field (an error name) runs on into
    /// the body: that was read as the error name; now it is a truncated message.
    #[test]
    fn a_header_field_past_the_field_array_is_refused() {
        let mut m = reply(3, 9, Some("org.freedesktop.systemd1.NoSuchUnit"), "s", &[]);
        // Shrink the field array's length to 8: field 4's string now ends far past it.
        // The body then starts at 24 and holds the rest, so the lengths stay consistent.
        m[12..16].copy_from_slice(&8u32.to_le_bytes());
        let body_len = (m.len() - 24) as u32;
        m[4..8].copy_from_slice(&body_len.to_le_bytes());
        assert!(message_length(&m).unwrap() == Some(m.len()));
        assert!(parse_message(&m).is_err());
    }

    #[test]
    fn the_protocol_version_and_body_length_are_checked() {
        let good = reply(2, 7, None, "", &[]);
        assert!(parse_message(&good).is_ok());
        let mut v2 = good.clone();
        v2[3] = 2;
        assert!(parse_message(&v2).is_err());
        assert!(message_length(&v2).is_err());
        let mut bad_endian = good.clone();
        bad_endian[0] = b'x';
        assert!(parse_message(&bad_endian).is_err());
        // A body shorter than declared is refused, not read as a shorter body.
        let mut short_body = good.clone();
        short_body[4..8].copy_from_slice(&8u32.to_le_bytes());
        assert!(parse_message(&short_body).is_err());
    }

    /// A peer that declares a 4 GiB body gets an error at once; nothing near that is
    /// allocated or waited for.
    #[tokio::test]
    async fn a_huge_declared_body_is_refused_without_allocating_it() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut conn = P2pConnection {
            stream: ours,
            rbuf: Vec::new(),
            serial: 0,
        };
        let mut header = vec![b'l', 2, 0, 1];
        header.extend_from_slice(&u32::MAX.to_le_bytes());
        header.extend_from_slice(&1u32.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        theirs.write_all(&header).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(2), conn.read_message()).await;
        assert!(matches!(r, Ok(Err(P2pError::Protocol(_)))), "{r:?}");
        assert!(conn.rbuf.capacity() < 64 * 1024);
        // A field array of 4 GiB likewise.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        conn.stream = ours;
        conn.rbuf.clear();
        let mut header = vec![b'l', 2, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0];
        header.extend_from_slice(&u32::MAX.to_le_bytes());
        theirs.write_all(&header).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(2), conn.read_message()).await;
        assert!(matches!(r, Ok(Err(P2pError::Protocol(_)))), "{r:?}");
        // An endless authentication line is cut off too.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        conn.stream = ours;
        conn.rbuf.clear();
        theirs.write_all(&[b'x'; 16 * 1024]).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(2), conn.read_line()).await;
        assert!(matches!(r, Ok(Err(P2pError::Protocol(_)))), "{r:?}");
    }

    /// Inputs tried by the property tests below: 10,000 random byte strings and 10,000
    /// mutations of valid replies.
    pub const PROPERTY_CASES: u32 = 10_000;

    fn valid_replies() -> Vec<Vec<u8>> {
        let mut s = Writer::default();
        s.string("252.38-1~deb12u1");
        let mut v = Writer::default();
        v.signature("s");
        v.string("/org/freedesktop/systemd1/unit/_2d_2eslice");
        vec![
            reply(2, 7, None, "s", &s.bytes),
            reply(2, 8, None, "v", &v.bytes),
            reply(
                3,
                9,
                Some("org.freedesktop.DBus.Error.Failed"),
                "s",
                &s.bytes,
            ),
            reply(2, 1, None, "", &[]),
            encode_call(&PING, 3),
        ]
    }

    /// Everything a caller does with an incoming message.
    fn consume(bytes: &[u8]) {
        if let Ok(Some(len)) = message_length(bytes) {
            assert!(len <= MAX_MESSAGE);
        }
        if let Ok(p) = parse_message(bytes) {
            assert!(p.body.len() <= bytes.len());
            let r = Reply {
                signature: p.signature,
                body: p.body,
                big_endian: p.big_endian,
            };
            let _ = r.string();
            let _ = r.variant_string();
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: PROPERTY_CASES, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            consume(&bytes);
        }

        #[test]
        fn mutated_replies_never_panic(
            which in 0usize..5,
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut m = valid_replies().swap_remove(which);
            for (at, byte, op) in edits {
                let i = at.index(m.len());
                match op {
                    0 | 1 => m[i] = byte,                 // overwrite (lengths, codes, signatures)
                    2 => m.insert(i, byte),
                    _ => { m.remove(i); }
                }
                if m.is_empty() { break; }
            }
            consume(&m);
            let keep = cut.index(m.len() + 1);
            consume(&m[..keep]);
        }
    }
}
