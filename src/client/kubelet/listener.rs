//! Who owns the socket that answers kubelet's healthz: the `uid` column of the listening
//! socket in `/proc/net/tcp` (or `tcp6`) of the host's network namespace.
//!
//! A failing `/healthz` with no PLEG line restarts kubelet only if the listener is root's: any
//! local user may bind 127.0.0.1:10248 while kubelet is down or restarting and answer 500
//! there for ever. The socket's own table is used, not a walk of /proc/*/fd: the unit's
//! ProtectProc=invisible hides other users' processes, and the table states the owner anyway.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The tables of listening sockets, IPv4 and IPv6.
const TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];
/// `st` of a listening socket.
const LISTEN: &str = "0A";

/// The uid owning the socket listening on `ip`:`port` (or on the wildcard address of its
/// family), read from the host's tables; None when no such listener is found or `host` is not
/// an address of this host (a name other than `localhost`).
pub fn listener_uid(host: &str, port: u16) -> Option<u32> {
    let ip = local_ip(host)?;
    TABLES.iter().find_map(|t| {
        let table = std::fs::read_to_string(t).ok()?;
        uid_in_table(&table, ip, port)
    })
}

fn local_ip(host: &str) -> Option<IpAddr> {
    if host.eq_ignore_ascii_case("localhost") {
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// The uid of the listener on `ip`:`port` (or the wildcard address) in one table's text.
pub fn uid_in_table(table: &str, ip: IpAddr, port: u16) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (local, st, uid) = (cols.get(1)?, cols.get(3)?, cols.get(7)?);
        if *st != LISTEN {
            return None;
        }
        let (addr, p) = local.split_once(':')?;
        if u16::from_str_radix(p, 16).ok()? != port {
            return None;
        }
        let bound = parse_addr(addr)?;
        let serves = bound == ip
            || bound.is_unspecified()
            || matches!((bound, ip), (IpAddr::V6(b), IpAddr::V4(v4)) if b.to_ipv4_mapped() == Some(v4));
        if !serves {
            return None;
        }
        uid.parse().ok()
    })
}

/// An address as the kernel prints it: 8 hex digits (IPv4) or 32 (IPv6), each 32-bit word in
/// the host's byte order.
fn parse_addr(hex: &str) -> Option<IpAddr> {
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(hex, 16).ok()?.to_ne_bytes(),
        ))),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                let w = u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?;
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as Linux prints them on x86_64 (little-endian words).
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2808 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81139 1 0 100 0 0 10 0
   1: 0100007F:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 81140 1 0 100 0 0 10 0
   2: 0100007F:2808 0100007F:D1C2 01 00000000:00000000 00:00000000 00000000  1000        0 81141 1 0 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:2808 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 9 1 0 100 0 0 10 0
   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9 1 0 100 0 0 10 0
";

    #[cfg(target_endian = "little")]
    #[test]
    fn the_owner_of_a_listener_is_read_from_the_table() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(uid_in_table(TCP, lo, 10248), Some(0));
        assert_eq!(uid_in_table(TCP, lo, 9000), Some(1000));
        // a connected socket on the port is no listener
        assert_eq!(uid_in_table(TCP, lo, 53698), None);
        assert_eq!(uid_in_table(TCP, "10.0.0.1".parse().unwrap(), 10248), None);
        let v6lo: IpAddr = "::1".parse().unwrap();
        assert_eq!(uid_in_table(TCP6, v6lo, 10248), Some(1001));
        // [::]:8080 serves 127.0.0.1 too
        assert_eq!(uid_in_table(TCP6, lo, 8080), Some(0));
        assert_eq!(uid_in_table("", lo, 10248), None);
        assert_eq!(uid_in_table("header\n garbage", lo, 10248), None);
    }

    /// Against the real table: a listener this test opens is found as this process's uid.
    #[test]
    fn a_real_listener_is_found_with_its_owner() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(
            listener_uid("127.0.0.1", port),
            Some(nix::unistd::geteuid().as_raw())
        );
        assert_eq!(
            listener_uid("localhost", port),
            Some(nix::unistd::geteuid().as_raw())
        );
        drop(l);
        assert_eq!(listener_uid("127.0.0.1", port), None);
        assert_eq!(listener_uid("kubelet.example", port), None);
    }
}
