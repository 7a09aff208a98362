//! Error explanations: where a byte offset sits (line, column) and toml/serde's messages
//! rephrased in the configuration's own words, with the nearest valid key suggested for an
//! unknown one.

/// 1-based line and column of a byte offset.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Rephrase toml/serde's messages in the config's own words, suggesting the nearest valid
/// key for an unknown one.
pub(super) fn explain_toml_error(message: &str) -> String {
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((key, expected)) = rest.split_once('`') {
            let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
            let nearest = candidates
                .iter()
                .map(|c| (edit_distance(key, c), *c))
                .filter(|(d, c)| *d <= 3 && *d < c.len().max(key.len()))
                .min();
            return match nearest {
                Some((_, c)) => format!("unknown key `{key}` (did you mean `{c}`?)"),
                None if candidates.is_empty() => format!("unknown key `{key}`"),
                None => format!(
                    "unknown key `{key}` (valid here: {})",
                    candidates.join(", ")
                ),
            };
        }
    }
    message.to_owned()
}

/// Levenshtein distance, for key suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}
