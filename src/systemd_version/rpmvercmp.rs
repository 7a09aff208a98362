//! rpm's version comparison (`rpmvercmp()`), which the version policy uses for releases.

use std::cmp::Ordering;

/// Compares two version (or release) strings exactly like rpm's `rpmvercmp()`.
///
/// Strings are split into maximal runs of ASCII digits or ASCII letters; any other characters
/// separate segments and are otherwise ignored. Numeric segments compare numerically (leading
/// zeros ignored, so `010` == `10`), alphabetic segments compare bytewise, and a numeric segment
/// is newer than an alphabetic one. `~` sorts before anything, even the end of the string
/// (`1.0~rc1` < `1.0`); `^` sorts after the end of the string but before any further segment
/// (`1.0` < `1.0^git1` < `1.0.1`). If all segments are equal, the string with characters left
/// over is newer.
pub fn rpmvercmp(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let one = a.as_bytes();
    let two = b.as_bytes();
    let (mut i, mut j) = (0usize, 0usize);
    let is_sep = |c: u8| !c.is_ascii_alphanumeric() && c != b'~' && c != b'^';
    while i < one.len() || j < two.len() {
        while i < one.len() && is_sep(one[i]) {
            i += 1;
        }
        while j < two.len() && is_sep(two[j]) {
            j += 1;
        }
        let c1 = one.get(i).copied();
        let c2 = two.get(j).copied();

        // Tilde sorts before everything else.
        if c1 == Some(b'~') || c2 == Some(b'~') {
            if c1 != Some(b'~') {
                return Ordering::Greater;
            }
            if c2 != Some(b'~') {
                return Ordering::Less;
            }
            i += 1;
            j += 1;
            continue;
        }
        // Caret sorts after the end of the string but before anything else.
        if c1 == Some(b'^') || c2 == Some(b'^') {
            if c1.is_none() {
                return Ordering::Less;
            }
            if c2.is_none() {
                return Ordering::Greater;
            }
            if c1 != Some(b'^') {
                return Ordering::Greater;
            }
            if c2 != Some(b'^') {
                return Ordering::Less;
            }
            i += 1;
            j += 1;
            continue;
        }
        let (Some(first), Some(_)) = (c1, c2) else {
            break;
        };

        let is_num = first.is_ascii_digit();
        let class = |c: &u8| {
            if is_num {
                c.is_ascii_digit()
            } else {
                c.is_ascii_alphabetic()
            }
        };
        let end1 = i + one[i..].iter().take_while(|c| class(c)).count();
        let end2 = j + two[j..].iter().take_while(|c| class(c)).count();
        let mut seg1 = &one[i..end1];
        let mut seg2 = &two[j..end2];

        // Cannot happen (the first string has a non-separator here), arbitrary as in rpm.
        if seg1.is_empty() {
            return Ordering::Less;
        }
        // Different segment types: numeric is newer than alphabetic.
        if seg2.is_empty() {
            return if is_num {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        if is_num {
            while let [b'0', rest @ ..] = seg1 {
                seg1 = rest;
            }
            while let [b'0', rest @ ..] = seg2 {
                seg2 = rest;
            }
            match seg1.len().cmp(&seg2.len()) {
                Ordering::Equal => {}
                other => return other,
            }
        }
        match seg1.cmp(seg2) {
            Ordering::Equal => {}
            other => return other,
        }
        i = end1;
        j = end2;
    }
    match (i < one.len(), j < two.len()) {
        (false, false) => Ordering::Equal,
        (true, _) => Ordering::Greater,
        (false, true) => Ordering::Less,
    }
}
