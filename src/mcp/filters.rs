//! What the list tools' filters read: a label selector in kubectl's equality-based syntax and
//! an instant, each refused with a message that names the argument.

use kube::core::{Expression, Selector};

/// Longest selector read (a page of labels, not a program).
const MAX_SELECTOR: usize = 1024;

/// A label selector as `kubectl get -l` takes it, equality-based: `k=v`, `k==v`, `k!=v`,
/// `k` (has the label), `!k` (has it not), comma-separated, all of which must hold.
pub(super) fn selector(text: &str) -> Result<Selector, String> {
    if text.len() > MAX_SELECTOR {
        return Err(format!("at most {MAX_SELECTOR} characters"));
    }
    let mut out = Selector::default();
    for part in text.split(',').map(str::trim) {
        let expr = if let Some((k, v)) = part.split_once("!=") {
            Expression::NotEqual(key(k)?, value(v)?)
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Expression::Equal(key(k)?, value(v)?)
        } else if let Some(k) = part.strip_prefix('!') {
            Expression::DoesNotExist(key(k)?)
        } else {
            Expression::Exists(key(part)?)
        };
        out.extend(expr);
    }
    Ok(out)
}

/// A label key: an optional DNS-subdomain prefix and a name of up to 63 characters.
fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    let (prefix, name) = k.rsplit_once('/').map_or((None, k), |(p, n)| (Some(p), n));
    let prefix_ok = prefix.is_none_or(crate::api::is_dns_subdomain);
    if prefix_ok && is_label_value(name) && !name.is_empty() {
        Ok(k.to_owned())
    } else {
        Err(format!("{k:?} is no label key"))
    }
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    if is_label_value(v) {
        Ok(v.to_owned())
    } else {
        Err(format!("{v:?} is no label value"))
    }
}

/// Up to 63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric (or empty).
fn is_label_value(v: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    v.len() <= 63 && v.chars().all(ok_char) && edge(v.chars().next()) && edge(v.chars().last())
}

/// An instant in RFC 3339 (`2026-12-01T10:00:00Z`, or with an offset).
pub(super) fn instant(text: &str) -> Result<jiff::Timestamp, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is no RFC 3339 time (e.g. 2026-12-01T10:00:00Z)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::SelectorExt;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_read_as_kubectl_reads_them() {
        let run = labels(&[("team", "payments"), ("runway.dev/workflow", "deploy")]);
        for (sel, want) in [
            ("team=payments", true),
            ("team==payments", true),
            ("team!=payments", false),
            ("team=search", false),
            ("team", true),
            ("!team", false),
            ("!env", true),
            ("team=payments, runway.dev/workflow=deploy", true),
            ("team=payments,runway.dev/workflow=other", false),
            ("env!=prod", true),
        ] {
            assert_eq!(selector(sel).unwrap().matches(&run), want, "{sel}");
        }
    }

    #[test]
    fn broken_selectors_and_times_say_what_is_wrong() {
        for bad in ["", "a b=c", "team=pay ments", "=x", "-team=x", "team=x,"] {
            assert!(selector(bad).is_err(), "{bad}");
        }
        assert!(selector(&"a".repeat(2000)).unwrap_err().contains("1024"));
        assert!(instant("yesterday").unwrap_err().contains("RFC 3339"));
        assert_eq!(
            instant("2026-12-01T11:00:00+01:00").unwrap(),
            "2026-12-01T10:00:00Z".parse::<jiff::Timestamp>().unwrap()
        );
    }
}
