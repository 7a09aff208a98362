//! A minimal blocking D-Bus client that talks from the host to a bed's system bus, and a load
//! generator built on it.
//!
//! The test process runs on the host; a bed's dbus-daemon listens on
//! `/run/dbus/system_bus_socket` inside the bed, which the host reaches as
//! `/proc/<host pid of the bed's PID 1>/root/run/dbus/system_bus_socket`. Host root is root in
//! the bed (no user namespace), so `AUTH EXTERNAL` as uid 0 is accepted.
//!
//! Why not busctl: a test needs the *header* of PID 1's reply (its serial, i.e. PID 1's sd-bus
//! cookie, the counter that runs out on an affected systemd), and a load generator needs
//! hundreds of calls per second without a process per call. Only what the tests need is here:
//! method calls whose arguments are strings, replies' serial / type / error name and a first
//! string argument. Everything is little-endian, protocol version 1.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// PID 1's well-known name on the bus.
pub const SYSTEMD1: &str = "org.freedesktop.systemd1";
const SYSTEMD1_PATH: &str = "/org/freedesktop/systemd1";
const SYSTEMD1_MANAGER: &str = "org.freedesktop.systemd1.Manager";

const MSG_METHOD_CALL: u8 = 1;
const MSG_METHOD_RETURN: u8 = 2;
const MSG_ERROR: u8 = 3;

const FIELD_PATH: u8 = 1;
const FIELD_INTERFACE: u8 = 2;
const FIELD_MEMBER: u8 = 3;
const FIELD_ERROR_NAME: u8 = 4;
const FIELD_REPLY_SERIAL: u8 = 5;
const FIELD_DESTINATION: u8 = 6;
const FIELD_SENDER: u8 = 7;
const FIELD_SIGNATURE: u8 = 8;

/// One method call with string arguments only.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    pub destination: &'a str,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
    pub args: &'a [&'a str],
}

/// `org.freedesktop.systemd1.Manager.GetUnit("init.scope")`: an ordinary method call to PID 1
/// (no property machinery: on a wedged affected PID 1 it simply gets no reply, and it never
/// knocks PID 1 off the bus the way `Properties.Get` does).
pub const GET_UNIT_INIT_SCOPE: Call<'static> = Call {
    destination: SYSTEMD1,
    path: SYSTEMD1_PATH,
    interface: SYSTEMD1_MANAGER,
    member: "GetUnit",
    args: &["init.scope"],
};

/// What came back for a call.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The reply's own serial: the sender's sd-bus cookie when it sealed the reply.
    pub serial: u32,
    /// The unique name that sent it.
    pub sender: Option<String>,
    /// `Some(name)` for an error reply.
    pub error_name: Option<String>,
    /// The first argument when the body starts with a string (or object path).
    pub first_string: Option<String>,
}

/// A parsed incoming message (only what we use).
#[derive(Clone, Debug)]
struct Incoming {
    msg_type: u8,
    serial: u32,
    reply_serial: Option<u32>,
    sender: Option<String>,
    error_name: Option<String>,
    first_string: Option<String>,
}

/// Why a call got no usable reply.
#[derive(Debug)]
pub enum CallError {
    /// No reply within the time limit (the connection stays usable).
    TimedOut(Duration),
    /// The socket failed or the peer spoke something we cannot parse.
    Io(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::TimedOut(d) => write!(f, "no reply within {d:?}"),
            CallError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The host path of a bed's system bus socket, given the host pid of the bed's PID 1.
pub fn bed_system_bus_socket(host_pid1: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{host_pid1}/root/run/dbus/system_bus_socket"))
}

/// A connection to a bed's system bus (authenticated, `Hello` done).
pub struct BusConn {
    stream: UnixStream,
    next_serial: u32,
    /// Our unique name (`:1.N`).
    pub unique_name: String,
}

impl BusConn {
    /// Connects to the system bus of the bed whose PID 1 has host pid `host_pid1`.
    pub fn connect(host_pid1: u32) -> Result<BusConn, String> {
        let path = bed_system_bus_socket(host_pid1);
        let stream =
            UnixStream::connect(&path).map_err(|e| format!("connect {}: {e}", path.display()))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| format!("set_read_timeout: {e}"))?;
        let mut conn = BusConn {
            stream,
            next_serial: 1,
            unique_name: String::new(),
        };
        conn.auth()
            .map_err(|e| format!("D-Bus auth on {}: {e}", path.display()))?;
        let hello = Call {
            destination: "org.freedesktop.DBus",
            path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus",
            member: "Hello",
            args: &[],
        };
        let r = conn
            .call(&hello, Duration::from_secs(10))
            .map_err(|e| format!("Hello on {}: {e}", path.display()))?;
        conn.unique_name = r
            .first_string
            .ok_or_else(|| format!("Hello on {} returned no name", path.display()))?;
        Ok(conn)
    }

    fn auth(&mut self) -> Result<(), String> {
        self.stream
            .write_all(b"\0AUTH EXTERNAL 30\r\n")
            .map_err(|e| e.to_string())?;
        let line = self.read_line()?;
        if !line.starts_with("OK ") {
            return Err(format!("server answered {line:?} to AUTH EXTERNAL"));
        }
        self.stream
            .write_all(b"BEGIN\r\n")
            .map_err(|e| e.to_string())
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            self.stream.read_exact(&mut b).map_err(|e| e.to_string())?;
            line.push(b[0]);
            if line.len() > 4096 {
                return Err("auth line too long".into());
            }
        }
        Ok(String::from_utf8_lossy(&line).trim_end().to_string())
    }

    /// Sends a call without waiting; returns its serial.
    pub fn send(&mut self, call: &Call<'_>) -> Result<u32, String> {
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1).max(1);
        self.stream
            .write_all(&encode_call(call, serial))
            .map_err(|e| format!("send {}: {e}", call.member))?;
        Ok(serial)
    }

    /// Calls and waits up to `timeout` for the reply (signals and other replies are skipped).
    pub fn call(&mut self, call: &Call<'_>, timeout: Duration) -> Result<Reply, CallError> {
        let serial = self.send(call).map_err(CallError::Io)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CallError::TimedOut(timeout));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| CallError::Io(e.to_string()))?;
            match read_message(&mut self.stream) {
                Ok(m) if m.reply_serial == Some(serial) => {
                    return Ok(Reply {
                        serial: m.serial,
                        sender: m.sender,
                        error_name: if m.msg_type == MSG_ERROR {
                            Some(m.error_name.unwrap_or_default())
                        } else {
                            None
                        },
                        first_string: m.first_string,
                    });
                }
                Ok(_) => continue,
                Err(ReadError::WouldBlock) => return Err(CallError::TimedOut(timeout)),
                Err(ReadError::Other(e)) => return Err(CallError::Io(e)),
            }
        }
    }

    /// The unique name that currently owns `name` (`GetNameOwner`).
    pub fn name_owner(&mut self, name: &str) -> Result<String, String> {
        let c = Call {
            destination: "org.freedesktop.DBus",
            path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus",
            member: "GetNameOwner",
            args: &[name],
        };
        let r = self
            .call(&c, Duration::from_secs(10))
            .map_err(|e| format!("GetNameOwner({name}): {e}"))?;
        if let Some(err) = r.error_name {
            return Err(format!("GetNameOwner({name}): {err}"));
        }
        r.first_string
            .ok_or_else(|| format!("GetNameOwner({name}) returned no string"))
    }

    /// `GetUnit("init.scope")` on PID 1; the reply (an error reply is an `Io` error).
    pub fn get_unit_init_scope(&mut self, timeout: Duration) -> Result<Reply, CallError> {
        let r = self.call(&GET_UNIT_INIT_SCOPE, timeout)?;
        match &r.error_name {
            Some(e) => Err(CallError::Io(format!(
                "GetUnit(init.scope): error reply {e}"
            ))),
            None => Ok(r),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// wire format
// ------------------------------------------------------------------------------------------------

fn pad_to(buf: &mut Vec<u8>, align: usize) {
    while buf.len() % align != 0 {
        buf.push(0);
    }
}

fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

fn put_string(buf: &mut Vec<u8>, s: &str) {
    pad_to(buf, 4);
    put_u32(buf, s.len() as u32);
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

fn put_field(fields: &mut Vec<u8>, code: u8, sig: u8, value: &str) {
    pad_to(fields, 8);
    fields.extend_from_slice(&[code, 1, sig, 0]);
    if sig == b'g' {
        fields.push(value.len() as u8);
        fields.extend_from_slice(value.as_bytes());
        fields.push(0);
    } else {
        put_string(fields, value);
    }
}

fn encode_call(call: &Call<'_>, serial: u32) -> Vec<u8> {
    let mut body = Vec::new();
    for a in call.args {
        put_string(&mut body, a);
    }
    let signature = "s".repeat(call.args.len());
    // header fields are laid out as if they started at offset 16 (8-aligned, so offsets agree)
    let mut fields = Vec::new();
    put_field(&mut fields, FIELD_PATH, b'o', call.path);
    put_field(&mut fields, FIELD_INTERFACE, b's', call.interface);
    put_field(&mut fields, FIELD_MEMBER, b's', call.member);
    put_field(&mut fields, FIELD_DESTINATION, b's', call.destination);
    if !signature.is_empty() {
        put_field(&mut fields, FIELD_SIGNATURE, b'g', &signature);
    }
    let mut out = vec![b'l', MSG_METHOD_CALL, 0, 1];
    put_u32(&mut out, body.len() as u32);
    put_u32(&mut out, serial);
    put_u32(&mut out, fields.len() as u32);
    out.extend_from_slice(&fields);
    pad_to(&mut out, 8);
    out.extend_from_slice(&body);
    out
}

enum ReadError {
    /// The read timeout passed before a whole message arrived.
    WouldBlock,
    Other(String),
}

fn read_message(stream: &mut UnixStream) -> Result<Incoming, ReadError> {
    let mut fixed = [0u8; 16];
    match stream.read_exact(&mut fixed) {
        Ok(()) => {}
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            return Err(ReadError::WouldBlock);
        }
        Err(e) => return Err(ReadError::Other(format!("read: {e}"))),
    }
    if fixed[0] != b'l' {
        return Err(ReadError::Other(format!(
            "big-endian or garbled message (first byte {:#x})",
            fixed[0]
        )));
    }
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let body_len = u32_at(&fixed, 4) as usize;
    let serial = u32_at(&fixed, 8);
    let fields_len = u32_at(&fixed, 12) as usize;
    if body_len > 64 << 20 || fields_len > 1 << 20 {
        return Err(ReadError::Other("message too large".into()));
    }
    let header_len = (16 + fields_len).div_ceil(8) * 8;
    let mut rest = vec![0u8; header_len - 16 + body_len];
    // once the first bytes arrived, the rest follows at once: wait for it regardless of the
    // caller's deadline, so the stream never loses sync
    let old = stream.read_timeout().ok().flatten();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let r = stream.read_exact(&mut rest);
    let _ = stream.set_read_timeout(old);
    r.map_err(|e| ReadError::Other(format!("read message: {e}")))?;
    let mut msg = vec![0u8; 16];
    msg.copy_from_slice(&fixed);
    msg.extend_from_slice(&rest);

    let mut m = Incoming {
        msg_type: fixed[1],
        serial,
        reply_serial: None,
        sender: None,
        error_name: None,
        first_string: None,
    };
    let mut signature = String::new();
    let mut p = 16;
    let end = 16 + fields_len;
    let bad = |what: &str| ReadError::Other(format!("malformed header: {what}"));
    while p < end {
        p = p.div_ceil(8) * 8;
        if p + 4 > end {
            return Err(bad("short field"));
        }
        let code = msg[p];
        let sig_len = msg[p + 1] as usize;
        let sig = msg
            .get(p + 2..p + 2 + sig_len)
            .ok_or_else(|| bad("signature"))?;
        let sig = sig.to_vec();
        p += 2 + sig_len + 1;
        match sig.as_slice() {
            b"u" => {
                p = p.div_ceil(4) * 4;
                let v = u32_at(msg.get(p..p + 4).ok_or_else(|| bad("u32"))?, 0);
                p += 4;
                if code == FIELD_REPLY_SERIAL {
                    m.reply_serial = Some(v);
                }
            }
            b"s" | b"o" => {
                p = p.div_ceil(4) * 4;
                let len = u32_at(msg.get(p..p + 4).ok_or_else(|| bad("string length"))?, 0);
                let s = msg
                    .get(p + 4..p + 4 + len as usize)
                    .ok_or_else(|| bad("string"))?;
                let s = String::from_utf8_lossy(s).into_owned();
                p += 4 + len as usize + 1;
                match code {
                    FIELD_SENDER => m.sender = Some(s),
                    FIELD_ERROR_NAME => m.error_name = Some(s),
                    _ => {}
                }
            }
            b"g" => {
                let len = *msg.get(p).ok_or_else(|| bad("signature length"))? as usize;
                let s = msg
                    .get(p + 1..p + 1 + len)
                    .ok_or_else(|| bad("signature"))?;
                if code == FIELD_SIGNATURE {
                    signature = String::from_utf8_lossy(s).into_owned();
                }
                p += 1 + len + 1;
            }
            other => {
                return Err(bad(&format!(
                    "unexpected field type {:?}",
                    String::from_utf8_lossy(other)
                )));
            }
        }
    }
    if signature.starts_with('s') || signature.starts_with('o') {
        let b = header_len;
        if let Some(lb) = msg.get(b..b + 4) {
            let len = u32_at(lb, 0) as usize;
            if let Some(s) = msg.get(b + 4..b + 4 + len) {
                m.first_string = Some(String::from_utf8_lossy(s).into_owned());
            }
        }
    }
    Ok(m)
}

// ------------------------------------------------------------------------------------------------
// load generator
// ------------------------------------------------------------------------------------------------

/// Counters of a running [`BusLoad`].
#[derive(Default)]
struct LoadCounters {
    sent: AtomicU64,
    replies: AtomicU64,
    errors: AtomicU64,
    last_serial: AtomicU64,
    max_latency_us: AtomicU64,
    /// Calls sent and not answered yet: serial -> when sent.
    pending: Mutex<std::collections::HashMap<u32, Instant>>,
    failure: Mutex<Option<String>>,
}

/// Makes PID 1 send replies at a known rate: ordinary `GetUnit("init.scope")` calls on one
/// connection, paced on an absolute schedule (`rate` per second), replies drained and counted
/// by a second thread. Stops on Drop (or [`BusLoad::stop`]).
pub struct BusLoad {
    stop: Arc<AtomicBool>,
    counters: Arc<LoadCounters>,
    sender: Option<JoinHandle<()>>,
    reader: Option<JoinHandle<()>>,
    /// Calls per second it aims at.
    pub rate: f64,
    started: Instant,
}

impl BusLoad {
    /// Starts the load on the system bus of the bed whose PID 1 has host pid `host_pid1`.
    pub fn start(host_pid1: u32, rate: f64) -> Result<BusLoad, String> {
        if !(rate > 0.0 && rate <= 5000.0) {
            return Err(format!("BusLoad rate {rate}/s is outside (0, 5000]"));
        }
        let conn = BusConn::connect(host_pid1)?;
        let mut write = conn;
        let mut read = write
            .stream
            .try_clone()
            .map_err(|e| format!("clone bus socket: {e}"))?;
        read.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| format!("set_read_timeout: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(LoadCounters::default());
        let started = Instant::now();
        let (s2, c2) = (stop.clone(), counters.clone());
        let sender = std::thread::spawn(move || {
            let period = Duration::from_secs_f64(1.0 / rate);
            let mut n: u32 = 0;
            while !s2.load(Ordering::SeqCst) {
                let due = started + period * n;
                let now = Instant::now();
                if due > now {
                    std::thread::sleep((due - now).min(Duration::from_millis(100)));
                    continue;
                }
                // registered before sending, so a fast reply always finds its entry
                let serial = write.next_serial;
                c2.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(serial, Instant::now());
                if let Err(e) = write.send(&GET_UNIT_INIT_SCOPE) {
                    *c2.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    break;
                }
                c2.sent.fetch_add(1, Ordering::SeqCst);
                n = n.saturating_add(1);
            }
        });
        let (s3, c3) = (stop.clone(), counters.clone());
        let reader = std::thread::spawn(move || {
            while !s3.load(Ordering::SeqCst) {
                let msg = read_message(&mut read);
                if let Ok(Incoming {
                    reply_serial: Some(rs),
                    ..
                }) = &msg
                {
                    let sent_at = c3
                        .pending
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(rs);
                    if let Some(t) = sent_at {
                        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                        c3.max_latency_us.fetch_max(us, Ordering::SeqCst);
                    }
                }
                match msg {
                    Ok(m) if m.reply_serial.is_some() && m.msg_type == MSG_ERROR => {
                        c3.errors.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(m) if m.reply_serial.is_some() && m.msg_type == MSG_METHOD_RETURN => {
                        c3.replies.fetch_add(1, Ordering::SeqCst);
                        c3.last_serial.store(u64::from(m.serial), Ordering::SeqCst);
                    }
                    Ok(_) | Err(ReadError::WouldBlock) => {}
                    Err(ReadError::Other(e)) => {
                        *c3.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        break;
                    }
                }
            }
        });
        Ok(BusLoad {
            stop,
            counters,
            sender: Some(sender),
            reader: Some(reader),
            rate,
            started,
        })
    }

    /// Calls sent so far.
    pub fn sent(&self) -> u64 {
        self.counters.sent.load(Ordering::SeqCst)
    }
    /// Successful replies from PID 1 so far.
    pub fn replies(&self) -> u64 {
        self.counters.replies.load(Ordering::SeqCst)
    }
    /// Error replies (e.g. dbus-daemon's LimitsExceeded when PID 1 stopped answering).
    pub fn errors(&self) -> u64 {
        self.counters.errors.load(Ordering::SeqCst)
    }
    /// Serial of PID 1's latest reply (0 before the first).
    pub fn last_serial(&self) -> u32 {
        u32::try_from(self.counters.last_serial.load(Ordering::SeqCst)).unwrap_or(u32::MAX)
    }
    /// The longest a call waited for its reply (or error) so far.
    pub fn max_latency(&self) -> Duration {
        Duration::from_micros(self.counters.max_latency_us.load(Ordering::SeqCst))
    }
    /// Calls sent longer than `age` ago that got no reply yet: PID 1 (or the bus) left them
    /// hanging. Zero throughout a test means no call to PID 1 timed out.
    pub fn unanswered_older_than(&self, age: Duration) -> usize {
        self.counters
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|t| t.elapsed() > age)
            .count()
    }
    /// Why a thread gave up, if one did (socket error).
    pub fn failure(&self) -> Option<String> {
        self.counters
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// Time since start.
    pub fn running_for(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops both threads and waits for them.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

impl Drop for BusLoad {
    fn drop(&mut self) {
        self.halt();
    }
}
