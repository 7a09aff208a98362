//! The storm guard: when more members of a group than `[fleet] max_unhealthy` report findings
//! that need a repair, a fault is fleet-wide (a bad image, a bad rollout, a sick control
//! plane) and is not cured node by node: disruptive repairs in the group pause. Pure.
//!
//! - A member counts when its member key (`members/<node>`, on a live lease) reports at least
//!   one finding and none that is exempt (a proven local cause explains the rest).
//! - A group of 5 or fewer live members never storms (as EKS node auto-repair counts only
//!   groups over 5 nodes).
//! - A cure whose cause is proven local to the node is exempt (by default `systemd-bus-wedge`:
//!   PID 1's own bus serial on that node, which a fleet of nodes from one image will reach in
//!   the same week). An exempt cure still needs a fleet slot: the storm guard decides whether
//!   a repair may ask at all, the budget how many run at once. A cure is exempt when one of
//!   the findings it is aimed at is; members reporting an exempt finding do not count towards
//!   a storm either.

use std::fmt;

use serde::Deserialize;

/// Groups of at most this many live members never storm.
pub const SMALL_GROUP: usize = 5;

/// The findings exempt by default: proven local to the node.
pub const DEFAULT_EXEMPT: &[&str] = &["systemd-bus-wedge"];

/// `[fleet] max_unhealthy`: how many members may report findings before repairs pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnhealthy {
    /// `""`: no storm guard.
    Off,
    /// `"3"`: more than this many members.
    Count(u32),
    /// `"20%"`: more than this share (0..=100) of the live members.
    Percent(u8),
}

impl Default for MaxUnhealthy {
    fn default() -> Self {
        MaxUnhealthy::Percent(20)
    }
}

impl fmt::Display for MaxUnhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnhealthy::Off => Ok(()),
            MaxUnhealthy::Count(n) => write!(f, "{n}"),
            MaxUnhealthy::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl std::str::FromStr for MaxUnhealthy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.is_empty() {
            return Ok(MaxUnhealthy::Off);
        }
        if let Some(p) = t.strip_suffix('%') {
            return match p.trim().parse::<u8>() {
                Ok(p @ 0..=100) => Ok(MaxUnhealthy::Percent(p)),
                _ => Err(format!(
                    "\"{s}\" is not a share between \"0%\" and \"100%\""
                )),
            };
        }
        t.parse::<u32>().map(MaxUnhealthy::Count).map_err(|_| {
            format!("\"{s}\" is neither a count (\"3\"), a share (\"20%\") nor \"\" (off)")
        })
    }
}

impl serde::Serialize for MaxUnhealthy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for MaxUnhealthy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl MaxUnhealthy {
    /// Whether `unhealthy` of `live` members is a storm.
    pub fn storming(self, live: usize, unhealthy: usize) -> bool {
        if live <= SMALL_GROUP {
            return false;
        }
        match self {
            MaxUnhealthy::Off => false,
            MaxUnhealthy::Count(n) => unhealthy > usize::try_from(n).unwrap_or(usize::MAX),
            MaxUnhealthy::Percent(p) => {
                unhealthy.saturating_mul(100) > live.saturating_mul(usize::from(p))
            }
        }
    }
}

/// What the storm guard reads from any member key: `{"node":"n1","findings":[...]}` is all a
/// member needs to write (other fields are ignored; no `findings`: none).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct MemberFindings {
    /// The findings the member acts on.
    #[serde(default)]
    pub findings: Vec<String>,
}

impl MemberFindings {
    /// A member key's value (an unreadable one reports nothing).
    pub fn parse(value: &[u8]) -> MemberFindings {
        serde_json::from_slice(value).unwrap_or_default()
    }
}

/// The group's health as its members report it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Health {
    /// Live members.
    pub members: usize,
    /// Members reporting findings, none of them exempt, by name.
    pub unhealthy: Vec<String>,
}

impl Health {
    /// From the member keys (node, value) of a group.
    pub fn of<'a>(
        members: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        exempt: &[String],
    ) -> Health {
        Health::of_findings(
            members
                .into_iter()
                .map(|(node, value)| (node, MemberFindings::parse(value).findings)),
            exempt,
        )
    }

    /// From each live member's name and the findings it reports (whatever the store).
    pub fn of_findings<'a>(
        members: impl IntoIterator<Item = (&'a str, Vec<String>)>,
        exempt: &[String],
    ) -> Health {
        let mut h = Health::default();
        for (node, findings) in members {
            h.members += 1;
            if !findings.is_empty() && !findings.iter().any(|x| exempt.contains(x)) {
                h.unhealthy.push(node.to_owned());
            }
        }
        h.unhealthy.sort();
        h
    }

    /// Whether this is a storm under `max`.
    pub fn storming(&self, max: MaxUnhealthy) -> bool {
        max.storming(self.members, self.unhealthy.len())
    }
}

/// Whether a cure aimed at `findings` is exempt from a storm pause: one of them is exempt
/// (proven local to the node).
pub fn exempt(findings: &[String], exempt: &[String]) -> bool {
    findings.iter().any(|f| exempt.contains(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex() -> Vec<String> {
        DEFAULT_EXEMPT.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_counts_shares_and_off() {
        assert_eq!("".parse(), Ok(MaxUnhealthy::Off));
        assert_eq!("20%".parse(), Ok(MaxUnhealthy::Percent(20)));
        assert_eq!(" 3 ".parse(), Ok(MaxUnhealthy::Count(3)));
        assert!("120%".parse::<MaxUnhealthy>().is_err());
        assert!("many".parse::<MaxUnhealthy>().is_err());
        assert_eq!(MaxUnhealthy::default().to_string(), "20%");
    }

    #[test]
    fn more_than_the_share_of_a_group_over_five_storms() {
        let m = MaxUnhealthy::Percent(20);
        assert!(!m.storming(10, 2), "20 % of 10 is not more than 20 %");
        assert!(m.storming(10, 3));
        assert!(!m.storming(5, 5), "a group of 5 never storms");
        assert!(m.storming(6, 2));
        assert!(MaxUnhealthy::Count(2).storming(100, 3));
        assert!(!MaxUnhealthy::Count(2).storming(100, 2));
        assert!(!MaxUnhealthy::Off.storming(100, 100));
        assert!(MaxUnhealthy::Percent(0).storming(6, 1));
    }

    #[test]
    fn members_reporting_an_exempt_finding_do_not_count() {
        let keys: Vec<(&str, &[u8])> = vec![
            ("a", br#"{"node":"a","findings":["logind-unresponsive"]}"#),
            ("b", br#"{"node":"b","findings":["systemd-bus-wedge"]}"#),
            (
                "c",
                br#"{"node":"c","findings":["systemd-bus-wedge","docker-unresponsive"]}"#,
            ),
            ("d", br#"{"node":"d","findings":[]}"#),
            ("e", b"not json"),
        ];
        let h = Health::of(keys, &ex());
        assert_eq!(h.members, 5);
        assert_eq!(h.unhealthy, ["a"]);
    }

    #[test]
    fn a_bus_wedge_cure_is_exempt_by_default_and_configurably() {
        let wedge = vec!["systemd-bus-wedge".to_owned()];
        let logind = vec!["logind-unresponsive".to_owned()];
        assert!(exempt(&wedge, &ex()));
        assert!(!exempt(&logind, &ex()));
        assert!(!exempt(&[], &ex()));
        assert!(!exempt(&wedge, &[]), "exemption switched off");
        let mixed = vec![
            "systemd-bus-wedge".to_owned(),
            "logind-unresponsive".to_owned(),
        ];
        assert!(exempt(&mixed, &ex()), "the wedge explains the rest");
    }
}
