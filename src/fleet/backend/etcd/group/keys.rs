//! The group's keys under `<prefix>/<group>/`: members, the two queues, the holders.

use crate::fleet::Urgency;

/// The key segment of member keys.
pub const MEMBERS: &str = "members/";
/// The key segment of holder keys.
pub const HOLDERS: &str = "holders/";
/// The key segment of every queue key.
pub const QUEUE: &str = "queue/";
/// The digits of a holder key's index.
const INDEX_WIDTH: usize = 6;

/// The keys of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys under `group_prefix` (`<prefix>/<group>/`).
    pub fn new(group_prefix: &str) -> Keys {
        let mut prefix = group_prefix.to_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Keys { prefix }
    }

    /// `<prefix>/<group>/`.
    pub fn group(&self) -> &str {
        &self.prefix
    }

    /// Every member key's prefix.
    pub fn members(&self) -> String {
        format!("{}{MEMBERS}", self.prefix)
    }

    /// `node`'s member key.
    pub fn member(&self, node: &str) -> String {
        format!("{}{MEMBERS}{node}", self.prefix)
    }

    /// Every holder key's prefix.
    pub fn holders(&self) -> String {
        format!("{}{HOLDERS}", self.prefix)
    }

    /// The holder key of slot `index`.
    pub fn holder(&self, index: usize) -> String {
        format!("{}{HOLDERS}{index:0INDEX_WIDTH$}", self.prefix)
    }

    /// The queue of one urgency (a prefix).
    pub fn queue(&self, urgency: Urgency) -> String {
        match urgency {
            Urgency::Emergency => format!("{}{QUEUE}emergency/", self.prefix),
            Urgency::Planned => format!("{}{QUEUE}planned/", self.prefix),
        }
    }

    /// Every queue key's prefix.
    pub fn queues(&self) -> String {
        format!("{}{QUEUE}", self.prefix)
    }

    /// `node`'s queue key for `urgency`.
    pub fn queued(&self, urgency: Urgency, node: &str) -> String {
        format!("{}{node}", self.queue(urgency))
    }

    /// The index of a holder key as this protocol writes it (`INDEX_WIDTH` digits; None: not
    /// a holder key of this group, or one no node of this version wrote).
    pub fn index_of(&self, key: &[u8]) -> Option<usize> {
        let rest = key.strip_prefix(self.holders().as_bytes())?;
        if rest.len() != INDEX_WIDTH || !rest.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(rest).ok()?.parse().ok()
    }

    /// The node of a key under a prefix of this group (`members/`, a queue).
    pub fn node_of<'a>(&self, prefix: &str, key: &'a [u8]) -> Option<&'a str> {
        std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()
    }
}

/// The end of the range of every key starting with `prefix` (etcd's `WithPrefix`).
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
