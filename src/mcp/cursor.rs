//! Where a page of Runs starts: the position of the last Run of the previous page, newest
//! first, carried by clients as an opaque cursor.

use crate::api::Run;

/// Where a page starts: after the Run created at `created` named `name` (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    created: jiff::Timestamp,
    name: String,
}

/// A Run's place in the list, borrowed: newest first means the greatest of these first.
pub(crate) use crate::store::place;

impl Position {
    /// The position of `run`.
    pub(crate) fn of(run: &Run) -> Self {
        let (created, name) = place(run);
        Self {
            created,
            name: name.to_owned(),
        }
    }

    /// The position, borrowed, to compare with [`place`].
    pub(crate) fn place(&self) -> (jiff::Timestamp, &str) {
        (self.created, &self.name)
    }

    /// The cursor handed to clients.
    pub(crate) fn encode(&self) -> String {
        data_encoding::BASE64URL_NOPAD.encode(format!("{}\n{}", self.created, self.name).as_bytes())
    }

    /// The position a cursor names; `None` for anything Runway did not hand out.
    pub(crate) fn decode(cursor: &str) -> Option<Self> {
        let bytes = data_encoding::BASE64URL_NOPAD
            .decode(cursor.as_bytes())
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (created, name) = text.split_once('\n')?;
        let created = created.parse::<jiff::Timestamp>().ok()?;
        crate::api::is_dns_subdomain(name).then(|| Self {
            created,
            name: name.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let p = Position {
            created: "2026-12-01T10:00:00Z".parse().unwrap(),
            name: "deploy-abc".into(),
        };
        assert_eq!(Position::decode(&p.encode()), Some(p));
        for bad in [
            "",
            "!!",
            "bm90IGEgY3Vyc29y",
            &data_encoding::BASE64URL_NOPAD.encode(b"yesterday\nx"),
        ] {
            assert_eq!(Position::decode(bad), None, "{bad}");
        }
        let upper = data_encoding::BASE64URL_NOPAD.encode(b"2026-12-01T10:00:00Z\nNot_A_Name");
        assert_eq!(Position::decode(&upper), None);
    }
}
