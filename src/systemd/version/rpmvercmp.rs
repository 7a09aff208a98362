//! rpm's version comparison (`rpmvercmp()`), used to order distribution releases.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpmvercmp_matches_rpm_test_suite() {
        use Ordering::{Equal as E, Greater as G, Less as L};
        let cases: &[(&str, &str, Ordering)] = &[
            ("1.0", "1.0", E),
            ("1.0", "2.0", L),
            ("2.0", "1.0", G),
            ("2.0.1", "2.0.1", E),
            ("2.0", "2.0.1", L),
            ("2.0.1", "2.0", G),
            ("2.0.1a", "2.0.1a", E),
            ("2.0.1a", "2.0.1", G),
            ("2.0.1", "2.0.1a", L),
            ("5.5p1", "5.5p1", E),
            ("5.5p1", "5.5p2", L),
            ("5.5p2", "5.5p1", G),
            ("5.5p10", "5.5p10", E),
            ("5.5p1", "5.5p10", L),
            ("5.5p10", "5.5p1", G),
            ("10xyz", "10.1xyz", L),
            ("10.1xyz", "10xyz", G),
            ("xyz10", "xyz10", E),
            ("xyz10", "xyz10.1", L),
            ("xyz10.1", "xyz10", G),
            ("xyz.4", "xyz.4", E),
            ("xyz.4", "8", L),
            ("8", "xyz.4", G),
            ("xyz.4", "2", L),
            ("2", "xyz.4", G),
            ("5.5p2", "5.6p1", L),
            ("5.6p1", "5.5p2", G),
            ("5.6p1", "6.5p1", L),
            ("6.5p1", "5.6p1", G),
            ("6.0.rc1", "6.0", G),
            ("6.0", "6.0.rc1", L),
            ("10b2", "10a1", G),
            ("10a2", "10b2", L),
            ("1.0aa", "1.0aa", E),
            ("1.0a", "1.0aa", L),
            ("1.0aa", "1.0a", G),
            ("10.0001", "10.0001", E),
            ("10.0001", "10.1", E),
            ("10.1", "10.0001", E),
            ("10.0001", "10.0039", L),
            ("10.0039", "10.0001", G),
            ("010", "10", E),
            ("4.999.9", "5.0", L),
            ("5.0", "4.999.9", G),
            ("20101121", "20101121", E),
            ("20101121", "20101122", L),
            ("20101122", "20101121", G),
            ("2_0", "2_0", E),
            ("2.0", "2_0", E),
            ("2_0", "2.0", E),
            ("a", "a", E),
            ("a+", "a+", E),
            ("a+", "a_", E),
            ("a_", "a+", E),
            ("+a", "+a", E),
            ("+a", "_a", E),
            ("_a", "+a", E),
            ("+_", "+_", E),
            ("_+", "+_", E),
            ("_+", "_+", E),
            ("+", "_", E),
            ("_", "+", E),
            ("1.0a", "1.0", G),
            ("1.0", "1.0a", L),
            ("1.0~rc1", "1.0~rc1", E),
            ("1.0~rc1", "1.0", L),
            ("1.0", "1.0~rc1", G),
            ("1.0~rc1", "1.0~rc2", L),
            ("1.0~rc2", "1.0~rc1", G),
            ("1.0~rc1~git123", "1.0~rc1~git123", E),
            ("1.0~rc1~git123", "1.0~rc1", L),
            ("1.0~rc1", "1.0~rc1~git123", G),
            ("1.0^", "1.0^", E),
            ("1.0^", "1.0", G),
            ("1.0", "1.0^", L),
            ("1.0^git1", "1.0^git1", E),
            ("1.0^git1", "1.0", G),
            ("1.0", "1.0^git1", L),
            ("1.0^git1", "1.0^git2", L),
            ("1.0^git2", "1.0^git1", G),
            ("1.0^git1", "1.01", L),
            ("1.01", "1.0^git1", G),
            ("1.0^20160101", "1.0^20160101", E),
            ("1.0^20160101", "1.0.1", L),
            ("1.0.1", "1.0^20160101", G),
            ("1.0^20160101^git1", "1.0^20160101^git1", E),
            ("1.0^20160102", "1.0^20160101^git1", G),
            ("1.0^20160101^git1", "1.0^20160102", L),
            ("1.0~rc1^git1", "1.0~rc1^git1", E),
            ("1.0~rc1^git1", "1.0~rc1", G),
            ("1.0~rc1", "1.0~rc1^git1", L),
            ("1.0^git1~pre", "1.0^git1~pre", E),
            ("1.0^git1", "1.0^git1~pre", G),
            ("1.0^git1~pre", "1.0^git1", L),
            ("1b.fc17", "1b.fc17", E),
            ("1b.fc17", "1.fc17", L),
            ("1.fc17", "1b.fc17", G),
            ("1g.fc17", "1g.fc17", E),
            ("1g.fc17", "1.fc17", G),
            ("1.fc17", "1g.fc17", L),
            // Releases relevant to issue 11809.
            ("62.el7_6.10", "62.el7_6.8", G),
            ("62.el7", "65", L),
            ("67.el7", "65", G),
            ("62.el7_6.8", "65", L),
            ("58.el8", "16", G),
            ("13.el8", "16", L),
            ("242~rc2", "242", L),
            // Non-ASCII bytes are separators, as in rpm's C locale.
            ("1.ä0", "1.0", E),
        ];
        for &(a, b, want) in cases {
            assert_eq!(rpmvercmp(a, b), want, "rpmvercmp({a:?}, {b:?})");
        }
    }
}
