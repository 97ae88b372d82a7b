//! Parameter checks shared by the op descriptors: each names the parameter, the value given and
//! the rule it breaks, so a caller can fix the one argument that is wrong.
//!
//! Invariant: every check returns [`Error::InvalidArgument`] with the op's name and a sentence
//! of the form "`<parameter>` `<rule>`, got `<value>`"; none panics.

use crate::{Error, Result};

/// `value` (named `name`, a `(height, width)` pair) must be at least 1 in both dims.
pub(crate) fn positive_pair(op: &'static str, name: &str, value: (usize, usize)) -> Result<()> {
    if value.0 == 0 || value.1 == 0 {
        return Err(Error::invalid(
            op,
            format!(
                "{name} must be positive (at least 1) in both dims (height, width), got {value:?}"
            ),
        ));
    }
    Ok(())
}

/// `value` (named `name`) must be at least 1.
pub(crate) fn positive(op: &'static str, name: &str, value: usize) -> Result<()> {
    if value == 0 {
        return Err(Error::invalid(
            op,
            format!("{name} must be positive (at least 1), got 0"),
        ));
    }
    Ok(())
}

/// `value` (described by `what`) must be divisible by `by` (described by `by_name`).
pub(crate) fn divisible(
    op: &'static str,
    what: &str,
    value: usize,
    by_name: &str,
    by: usize,
) -> Result<()> {
    if by == 0 || !value.is_multiple_of(by) {
        return Err(Error::invalid(
            op,
            format!("{what} must be divisible by {by_name} = {by}, got {value}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_names_the_parameter_the_rule_and_the_value() {
        let e = positive_pair("conv2d", "stride", (0, 1))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("stride") && e.contains("at least 1") && e.contains("(0, 1)"),
            "{e}"
        );
        let e = positive("conv2d", "groups", 0).unwrap_err().to_string();
        assert!(
            e.contains("groups must be positive (at least 1), got 0"),
            "{e}"
        );
        let e = divisible("conv2d", "input channels C", 5, "groups", 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("input channels C must be divisible by groups = 2, got 5"),
            "{e}"
        );
        assert!(positive_pair("x", "s", (1, 2)).is_ok() && divisible("x", "a", 4, "b", 2).is_ok());
    }
}
