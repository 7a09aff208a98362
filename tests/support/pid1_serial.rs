//! PID 1's system-bus serial in a bed: find PID 1's `struct sd_bus`, read its `cookie`, and
//! fast-forward it — the months of unit churn that bring an affected PID 1 to 2^32 messages
//! (systemd#11809), compressed into one `pwrite`.
//!
//! The bed's PID 1 is an ordinary host process, so root on the host can read and write its
//! memory through `/proc/PID/mem` (no gdb, no ptrace stop). Layout of `struct sd_bus` in
//! bookworm's `libsystemd-shared-252.so` on x86-64 (read off the disassembly of that very
//! library: `sd_bus_is_open` reads `state` at 0x4, `sd_bus_get_fd` compares `input_fd` 0x8 with
//! `output_fd` 0xc, `bus_seal_message` increments the u64 at 0x58, `sd_bus_get_unique_name`
//! returns the pointer at 0x68; they match `src/libsystemd/sd-bus/bus-internal.h` of v252:
//! `n_ref, state, input_fd, output_fd, inotify_fd, ...; uint64_t cookie; ...; char *unique_name`).
//!
//! Finding the object: PID 1's unique name on the bus (`GetNameOwner("org.freedesktop.systemd1")`,
//! e.g. `:1.0`) sits NUL-terminated in PID 1's heap, and its system-bus `sd_bus` holds a pointer
//! to it at 0x68. Every 8-byte-aligned word in PID 1's heap and anonymous rw mappings that equals
//! the address of that string gives a candidate `base = word address - 0x68`, kept when
//! `state == BUS_RUNNING (5)` and `input_fd == output_fd >= 0`. A candidate is *confirmed*
//! only by behaviour: after each of a few ordinary calls to PID 1 (`GetUnit("init.scope")`),
//! the cookie in memory must equal the serial in the header of PID 1's reply, and rise by
//! exactly one per call (retried when other traffic interleaves; under steady traffic that
//! interleaves every time, each of 5 replies' serials must fall between the readings taken
//! just before and just after its call). Only a confirmed object is
//! ever written. The address is cached per PID 1 and re-validated at each use; after a
//! `daemon-reexec` (new address space, new unique name) it is found afresh.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Bed;
use super::bus_client::{BusConn, BusLoad, CallError, Reply, SYSTEMD1};

/// Offsets in `struct sd_bus` (systemd 252, x86-64).
pub const SD_BUS_STATE: u64 = 0x4;
pub const SD_BUS_INPUT_FD: u64 = 0x8;
pub const SD_BUS_OUTPUT_FD: u64 = 0xc;
pub const SD_BUS_COOKIE: u64 = 0x58;
pub const SD_BUS_UNIQUE_NAME: u64 = 0x68;
/// `BUS_RUNNING` in 252's `enum bus_state` (UNSET, WATCH_BIND, OPENING, AUTHENTICATING, HELLO,
/// RUNNING, CLOSING, CLOSED).
pub const BUS_RUNNING: u32 = 5;
/// The serial an affected sd-bus can no longer send past (`sd_bus_message_seal()` refuses any
/// cookie above it), and where a fixed one wraps.
pub const SERIAL_MAX: u64 = u32::MAX as u64;
/// Where a fixed sd-bus (v242+) continues after `SERIAL_MAX`: `COOKIE_CYCLED`.
pub const COOKIE_CYCLED: u64 = 0x8000_0000;

const STRUCT_LEN: usize = 0x70;
/// Calls made to confirm a candidate.
const CONFIRM_CALLS: usize = 3;
/// Attempts at a clean run of CONFIRM_CALLS (other traffic of PID 1 can interleave).
const CONFIRM_ATTEMPTS: usize = 10;
/// Calls of the fallback confirmation under steady traffic.
const SANDWICH_CALLS: usize = 5;
/// Never read more than this of PID 1's memory in one scan.
const SCAN_LIMIT: u64 = 512 << 20;

/// PID 1's system-bus `struct sd_bus`, found and confirmed.
#[derive(Clone, Debug)]
pub struct Pid1BusObject {
    /// Host pid of the bed's PID 1.
    pub host_pid: u32,
    /// Address of the `struct sd_bus` in PID 1.
    pub address: u64,
    /// PID 1's unique name on the bus when it was found.
    pub unique_name: String,
    /// Scan plus confirmation time (zero when it came from the cache).
    pub found_in: Duration,
    /// Candidates the scan produced before confirmation.
    pub candidates: usize,
    /// Bytes of PID 1's memory scanned.
    pub scanned_bytes: u64,
}

static FOUND: Mutex<Vec<Pid1BusObject>> = Mutex::new(Vec::new());

// ------------------------------------------------------------------------------------------------
// /proc/PID/maps and /proc/PID/mem
// ------------------------------------------------------------------------------------------------

/// PID 1's heap and anonymous private rw mappings: (start, end).
fn anon_rw_regions(pid: u32) -> Result<Vec<(u64, u64)>, String> {
    let path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let name = f.nth(3).unwrap_or("");
        if !perms.starts_with("rw") || !(name.is_empty() || name == "[heap]") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            return Err(format!("{path}: cannot parse range {range:?}"));
        };
        out.push((a, b));
    }
    Ok(out)
}

fn open_mem(pid: u32, write: bool) -> Result<File, String> {
    let path = format!("/proc/{pid}/mem");
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(&path)
        .map_err(|e| format!("open {path}: {e}"))
}

/// Reads `len` bytes of PID `pid`'s memory at `addr`.
pub fn read_mem(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, String> {
    let f = open_mem(pid, false)?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, addr)
        .map_err(|e| format!("read {len} bytes of pid {pid} at {addr:#x}: {e}"))?;
    Ok(buf)
}

fn read_u64(pid: u32, addr: u64) -> Result<u64, String> {
    let b = read_mem(pid, addr, 8)?;
    Ok(u64::from_le_bytes([
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
    ]))
}

fn write_u64(pid: u32, addr: u64, v: u64) -> Result<(), String> {
    let f = open_mem(pid, true)?;
    f.write_all_at(&v.to_le_bytes(), addr)
        .map_err(|e| format!("write pid {pid} at {addr:#x}: {e}"))
}

fn le_u32(b: &[u8], at: u64) -> u32 {
    let i = at as usize;
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn le_u64(b: &[u8], at: u64) -> u64 {
    let i = at as usize;
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// Does the struct at `base` look like a running, connected sd_bus whose unique name is `name`?
fn plausible(pid: u32, base: u64, name: &str) -> Result<bool, String> {
    let s = read_mem(pid, base, STRUCT_LEN)?;
    let state = le_u32(&s, SD_BUS_STATE);
    let (inp, outp) = (
        le_u32(&s, SD_BUS_INPUT_FD) as i32,
        le_u32(&s, SD_BUS_OUTPUT_FD) as i32,
    );
    if state != BUS_RUNNING || inp != outp || inp < 0 {
        return Ok(false);
    }
    let ptr = le_u64(&s, SD_BUS_UNIQUE_NAME);
    let mut want = name.as_bytes().to_vec();
    want.push(0);
    Ok(read_mem(pid, ptr, want.len()).is_ok_and(|got| got == want))
}

/// Scans PID 1's heap and anonymous rw memory for candidate `struct sd_bus` addresses whose
/// `unique_name` points at `name` (NUL-terminated, matched exactly). Returns (candidates,
/// bytes scanned).
fn scan(pid: u32, name: &str) -> Result<(Vec<u64>, u64), String> {
    let regions = anon_rw_regions(pid)?;
    let f = open_mem(pid, false)?;
    let mut needle = name.as_bytes().to_vec();
    needle.push(0);
    let mut images: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut total = 0u64;
    for (a, b) in regions {
        let len = b - a;
        if total + len > SCAN_LIMIT {
            break;
        }
        let mut buf = vec![0u8; len as usize];
        // guard pages and the like cannot be read: skip them
        if f.read_exact_at(&mut buf, a).is_ok() {
            total += len;
            images.push((a, buf));
        }
    }
    // 1. where the string lives (it must start right after a NUL or at an 8-aligned malloc
    //    chunk, but the pointer test below is exact anyway)
    let mut strings = HashSet::new();
    for (a, buf) in &images {
        let mut i = 0;
        while let Some(pos) = find(&buf[i..], &needle) {
            strings.insert(a + (i + pos) as u64);
            i += pos + 1;
        }
    }
    // 2. 8-byte words pointing at one of them, at offset 0x68 of a plausible struct
    let mut candidates = Vec::new();
    for (a, buf) in &images {
        for (k, w) in buf.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            if !strings.contains(&v) {
                continue;
            }
            let at = a + (k as u64) * 8;
            let Some(base) = at.checked_sub(SD_BUS_UNIQUE_NAME) else {
                continue;
            };
            if base < *a {
                continue;
            }
            if plausible(pid, base, name)? {
                candidates.push(base);
            }
        }
    }
    Ok((candidates, total))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Confirms by behaviour that the cookie at `base` is the one PID 1 seals its replies with:
/// after each ordinary call, memory equals the reply's serial, one higher than before.
fn confirm(conn: &mut BusConn, pid: u32, base: u64, name: &str) -> Result<bool, String> {
    for _ in 0..CONFIRM_ATTEMPTS {
        let mut prev = read_u64(pid, base + SD_BUS_COOKIE)?;
        let mut clean = true;
        for _ in 0..CONFIRM_CALLS {
            let r = conn
                .get_unit_init_scope(Duration::from_secs(5))
                .map_err(|e| {
                    format!(
                        "PID 1 did not answer GetUnit while confirming its sd_bus object ({e}); \
                         is it wedged already? Find the object before fast-forwarding"
                    )
                })?;
            let now = read_u64(pid, base + SD_BUS_COOKIE)?;
            if r.sender.as_deref() != Some(name) {
                return Err(format!(
                    "reply came from {:?}, not PID 1's {name}",
                    r.sender
                ));
            }
            let serial = u64::from(r.serial);
            if !(prev < serial && serial <= now) {
                return Ok(false); // not the cookie PID 1 sealed this reply with
            }
            if now != serial || serial != prev + 1 {
                clean = false; // other traffic interleaved: try again
                break;
            }
            prev = now;
        }
        if clean {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Steady traffic (a load generator, a busy pleg-guard) can interleave every time: then
    // each of a few calls must land between two readings, `before < reply serial <= after`.
    for _ in 0..SANDWICH_CALLS {
        let before = read_u64(pid, base + SD_BUS_COOKIE)?;
        let r = conn
            .get_unit_init_scope(Duration::from_secs(5))
            .map_err(|e| format!("PID 1 did not answer GetUnit while confirming: {e}"))?;
        let after = read_u64(pid, base + SD_BUS_COOKIE)?;
        let serial = u64::from(r.serial);
        if !(before < serial && serial <= after) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Finds (or takes from the cache and re-validates) PID 1's system-bus `struct sd_bus`.
/// PID 1 must answer on the bus when it is not cached yet.
pub fn pid1_bus_object(host_pid1: u32) -> Result<Pid1BusObject, String> {
    let mut conn = BusConn::connect(host_pid1)?;
    let name = conn.name_owner(SYSTEMD1)?;
    let cached = FOUND
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|o| o.host_pid == host_pid1 && o.unique_name == name)
        .cloned();
    if let Some(o) = cached {
        if plausible(host_pid1, o.address, &name)? {
            return Ok(Pid1BusObject {
                found_in: Duration::ZERO,
                ..o
            });
        }
    }
    let start = Instant::now();
    let (candidates, scanned) = scan(host_pid1, &name)?;
    let mut confirmed = Vec::new();
    for &c in &candidates {
        if confirm(&mut conn, host_pid1, c, &name)? {
            confirmed.push(c);
        }
    }
    let [address] = confirmed[..] else {
        return Err(format!(
            "PID 1 (host pid {host_pid1}, {name}): {} candidate sd_bus object(s) {:x?} in {} MiB, \
             {} confirmed {:x?}: expected exactly one",
            candidates.len(),
            candidates,
            scanned >> 20,
            confirmed.len(),
            confirmed
        ));
    };
    let obj = Pid1BusObject {
        host_pid: host_pid1,
        address,
        unique_name: name,
        found_in: start.elapsed(),
        candidates: candidates.len(),
        scanned_bytes: scanned,
    };
    let mut cache = FOUND.lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|o| o.host_pid != host_pid1);
    cache.push(obj.clone());
    Ok(obj)
}

/// PID 1's current cookie (the serial of its latest message on the system bus).
pub fn pid1_bus_serial(host_pid1: u32) -> Result<u64, String> {
    let o = pid1_bus_object(host_pid1)?;
    read_u64(host_pid1, o.address + SD_BUS_COOKIE)
}

/// Sets PID 1's cookie to `to` (its next message gets `to + 1`). PID 1 runs meanwhile, so a
/// write can be lost to its own `++cookie`: read back and retry. Returns the value before.
pub fn fast_forward_pid1_serial(host_pid1: u32, to: u64) -> Result<u64, String> {
    let o = pid1_bus_object(host_pid1)?;
    let addr = o.address + SD_BUS_COOKIE;
    let before = read_u64(host_pid1, addr)?;
    for _ in 0..20 {
        write_u64(host_pid1, addr, to)?;
        std::thread::sleep(Duration::from_millis(20));
        let now = read_u64(host_pid1, addr)?;
        // PID 1 may have sent a few messages since; a lost write leaves it near `before`
        if now >= to && now - to < 10_000 {
            return Ok(before);
        }
    }
    Err(format!(
        "could not set PID 1's bus cookie at {addr:#x} to {to:#x} (was {before:#x})"
    ))
}

// ------------------------------------------------------------------------------------------------
// on the bed
// ------------------------------------------------------------------------------------------------

impl Bed {
    /// PID 1's system-bus `struct sd_bus` (found once, then cached); panics with the reason.
    pub fn pid1_bus_object(&self) -> Pid1BusObject {
        pid1_bus_object(self.host_pid1())
            .unwrap_or_else(|e| panic!("bed {}: PID 1's sd_bus object: {e}", self.name))
    }

    /// PID 1's current system-bus serial (its sd-bus `cookie`: the serial of the latest message
    /// it sealed). Works on a wedged PID 1 once the object was found while it still answered.
    pub fn pid1_bus_serial(&self) -> u64 {
        pid1_bus_serial(self.host_pid1())
            .unwrap_or_else(|e| panic!("bed {}: PID 1's bus serial: {e}", self.name))
    }

    /// Fast-forwards PID 1's system-bus serial to `to` (the next message it sends gets
    /// `to + 1`). Returns the serial before.
    pub fn fast_forward_pid1_serial(&self, to: u64) -> u64 {
        let before = fast_forward_pid1_serial(self.host_pid1(), to)
            .unwrap_or_else(|e| panic!("bed {}: fast-forward: {e}", self.name));
        eprintln!(
            "bed {}: PID 1's bus serial fast-forwarded {before} -> {to} ({to:#x})",
            self.name
        );
        before
    }

    /// A fresh host-side connection to the bed's system bus.
    pub fn bus_conn(&self) -> BusConn {
        BusConn::connect(self.host_pid1())
            .unwrap_or_else(|e| panic!("bed {}: system bus: {e}", self.name))
    }

    /// One ordinary call to PID 1 (`GetUnit("init.scope")`) on a fresh connection.
    pub fn try_pid1_call(&self, timeout: Duration) -> Result<Reply, CallError> {
        self.bus_conn().get_unit_init_scope(timeout)
    }

    /// The serial of PID 1's reply to one ordinary call; panics if it does not answer in 5 s.
    pub fn pid1_reply_serial(&self) -> u32 {
        self.try_pid1_call(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("bed {}: GetUnit on PID 1: {e}", self.name))
            .serial
    }

    /// Makes PID 1 send about `rate` replies per second until the guard is dropped.
    pub fn bus_load(&self, rate: f64) -> BusLoad {
        BusLoad::start(self.host_pid1(), rate)
            .unwrap_or_else(|e| panic!("bed {}: bus load: {e}", self.name))
    }
}
