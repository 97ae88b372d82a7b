//! Parsing helpers for environment values: sizes, switches, and the warnings for values that do
//! not parse (printed once, when the configuration is read).

/// Warnings collected while reading the environment, printed together.
#[derive(Default)]
pub(crate) struct Warnings(Vec<String>);

impl Warnings {
    /// Records that `name` held `value`, which is not `expected`.
    pub(crate) fn bad(&mut self, name: &str, value: &str, expected: &str) {
        self.0.push(format!(
            "xpu: ignoring {name}={value:?}: expected {expected}; the default is used"
        ));
    }

    /// Prints every warning to stderr.
    pub(crate) fn print(self) {
        for w in self.0 {
            eprintln!("{w}");
        }
    }
}

/// Parses `1048576`, `512M`, `2G`, `64K` (binary units); `None` for anything else or overflow.
pub fn parse_bytes(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let (num, mul) = match raw.chars().last()?.to_ascii_uppercase() {
        'K' => (&raw[..raw.len() - 1], 1u64 << 10),
        'M' => (&raw[..raw.len() - 1], 1 << 20),
        'G' => (&raw[..raw.len() - 1], 1 << 30),
        _ => (raw, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// A switch: `Some(true)` for `1`/`on`/`true`, `Some(false)` for `0`/`off`/`false`, `None` when
/// unset; anything else warns and counts as unset.
pub(crate) fn switch(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &str,
    warn: &mut Warnings,
) -> Option<bool> {
    let value = lookup(name)?;
    match value.trim().to_ascii_lowercase().as_str() {
        "" => None,
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => {
            warn.bad(name, &value, "1 or 0");
            None
        }
    }
}

/// One of `choices` (case-insensitive), or `None` when unset; anything else warns.
pub(crate) fn choice<T: Copy>(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &str,
    choices: &[(&str, T)],
    warn: &mut Warnings,
) -> Option<T> {
    let value = lookup(name)?;
    let v = value.trim().to_ascii_lowercase();
    if v.is_empty() {
        return None;
    }
    if let Some((_, t)) = choices.iter().find(|(k, _)| *k == v) {
        return Some(*t);
    }
    let names: Vec<&str> = choices.iter().map(|(k, _)| *k).collect();
    warn.bad(name, &value, &format!("one of {}", names.join(", ")));
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1048576"), Some(1 << 20));
        assert_eq!(parse_bytes(" 2G "), Some(2 << 30));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("M"), None);
        assert_eq!(parse_bytes("99999999999999999999G"), None);
        assert_eq!(parse_bytes(""), None);
    }
}
