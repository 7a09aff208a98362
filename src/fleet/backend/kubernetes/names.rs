//! The names backend kubernetes gives its objects (docs/CONTRACT: issue 43), and what makes a
//! group, node or namespace fit them (pure).
//!
//! - a slot is the Lease `<group>-slot-<i>` (i < the budget), labelled [`GROUP_LABEL`]`=<group>`;
//! - a member reporting findings keeps the Lease `<group>-finding-<node>`, same label, with
//!   the annotation [`FINDINGS_ANNOTATION`] = comma-separated finding ids.
//!
//! A Lease name is a DNS-1123 subdomain (at most 253 of `a-z`, `0-9`, `-`, `.`, starting and
//! ending alphanumeric); a label value at most 63 characters; a namespace a DNS-1123 label.

/// The label every Lease of a group carries: `pleg-guard.io/group=<group>`.
pub const GROUP_LABEL: &str = "pleg-guard.io/group";
/// The annotation of a finding Lease: the comma-separated finding ids.
pub const FINDINGS_ANNOTATION: &str = "pleg-guard.io/findings";
/// The longest Lease name (a DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// The longest label value, and namespace name.
pub const MAX_LABEL: usize = 63;

/// The Lease of slot `i` of `group`.
pub fn slot_lease(group: &str, i: usize) -> String {
    format!("{group}-slot-{i}")
}

/// The finding Lease of `node` in `group`.
pub fn finding_lease(group: &str, node: &str) -> String {
    format!("{group}-finding-{node}")
}

/// The label selector of a group's Leases.
pub fn group_selector(group: &str) -> String {
    format!("{GROUP_LABEL}={group}")
}

/// Which slot a Lease name of `group` is (None: not a slot of this group).
pub fn slot_index(group: &str, name: &str) -> Option<usize> {
    let digits = name.strip_prefix(group)?.strip_prefix("-slot-")?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

fn dns_chars_ok(s: &str, allow_dot: bool) -> bool {
    let b = s.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().copied().is_some_and(edge)
        && b.last().copied().is_some_and(edge)
        && b.iter()
            .all(|&c| edge(c) || c == b'-' || (allow_dot && c == b'.'))
}

/// `fleet.group` with backend kubernetes: a label value and the start of a Lease name.
pub fn check_group(group: &str) -> Result<(), String> {
    if group.len() > MAX_LABEL || !dns_chars_ok(group, true) {
        return Err(format!(
            "`fleet.group` with `fleet.backend = \"kubernetes\"` must be 1 to {MAX_LABEL} of `a-z`, `0-9`, `-`, `.`, starting and ending with a letter or digit (it names Leases and is the value of the label `{GROUP_LABEL}`), not \"{group}\""
        ));
    }
    Ok(())
}

/// `fleet.node` (or the host name) with backend kubernetes: the end of a Lease name.
pub fn check_node(node: &str) -> Result<(), String> {
    let longest = MAX_NAME - "-finding-".len() - MAX_LABEL;
    if node.len() > longest || !dns_chars_ok(node, true) {
        return Err(format!(
            "`fleet.node` with `fleet.backend = \"kubernetes\"` must be 1 to {longest} of `a-z`, `0-9`, `-`, `.`, starting and ending with a letter or digit (it ends the Lease name `<group>-finding-<node>`; a Node's own name is), not \"{node}\""
        ));
    }
    Ok(())
}

/// `fleet.namespace`: a DNS-1123 label.
pub fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.len() > MAX_LABEL || !dns_chars_ok(namespace, false) {
        return Err(format!(
            "`fleet.namespace` must be a namespace name: 1 to {MAX_LABEL} of `a-z`, `0-9`, `-`, starting and ending with a letter or digit, not \"{namespace}\""
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_contracts() {
        assert_eq!(slot_lease("pool-a", 0), "pool-a-slot-0");
        assert_eq!(finding_lease("pool-a", "n1"), "pool-a-finding-n1");
        assert_eq!(group_selector("pool-a"), "pleg-guard.io/group=pool-a");
        assert_eq!(slot_index("pool-a", "pool-a-slot-0"), Some(0));
        assert_eq!(slot_index("pool-a", "pool-a-slot-12"), Some(12));
        for not in [
            "pool-a-slot-",
            "pool-a-slot-01",
            "pool-a-slot-1x",
            "pool-b-slot-1",
            "pool-a-finding-n1",
            "pool-a-slot-99999999999999999999999",
        ] {
            assert_eq!(slot_index("pool-a", not), None, "{not}");
        }
    }

    #[test]
    fn groups_nodes_and_namespaces_must_fit_kubernetes_names() {
        assert!(check_group("pool-a").is_ok());
        assert!(check_group("eu.pool-1").is_ok());
        for bad in ["", "Pool", "a_b", "-a", "a-", &"a".repeat(64)] {
            let e = check_group(bad).unwrap_err();
            assert!(e.contains("`fleet.group`"), "{bad}: {e}");
        }
        assert!(check_node("ip-10-0-0-5.ec2.internal").is_ok());
        assert!(check_node("Node1").is_err());
        assert!(check_node(&"a".repeat(182)).is_err());
        assert!(check_node(&"a".repeat(181)).is_ok());
        assert!(check_namespace("pleg-guard").is_ok());
        for bad in ["", "a.b", "Pleg", "-x", &"a".repeat(64)] {
            assert!(check_namespace(bad).is_err(), "{bad}");
        }
    }
}
