//! The `host:port` part of a URL (its authority), split the one way every URL of the
//! configuration is: kubelet's healthz URL and the etcd endpoints.

/// `authority` split at its last `:` outside an IPv6 literal's brackets: the host as written
/// (brackets kept, see [`host`]) and the port's text, if there is one. Checking the port (and
/// what a missing one means) is the caller's.
pub fn split(authority: &str) -> (&str, Option<&str>) {
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, Some(p)),
        _ => (authority, None),
    }
}

/// The host without an IPv6 literal's brackets (`[::1]` → `::1`).
pub fn host(written: &str) -> &str {
    written.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_last_colon_outside_brackets() {
        assert_eq!(split("localhost:8080"), ("localhost", Some("8080")));
        assert_eq!(split("localhost"), ("localhost", None));
        assert_eq!(split("[::1]:10248"), ("[::1]", Some("10248")));
        assert_eq!(split("10.0.0.5:"), ("10.0.0.5", Some("")));
        assert_eq!(host("[::1]"), "::1");
        assert_eq!(host("node-1"), "node-1");
    }
}
