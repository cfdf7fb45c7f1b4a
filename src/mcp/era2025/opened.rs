//! The session ids this thread opened last, per state, caller and path. A 2025-era client
//! sends the same sealed `Mcp-Session-Id` with every request, and opening it (authenticated
//! decryption, then the session's JSON) was the largest part of answering its `tasks/get`
//! that is not the transport's. What an id opens as depends only on the id, the binding (the
//! caller and the path) and the server's state keys, which do not change while a state lives;
//! the state is told apart by its process-unique `McpState::id`, so a thread serving two
//! servers (tests do) never carries one server's session over to the other. Only ids that
//! opened are kept: a forged id is decrypted, and refused, every time.

use std::cell::RefCell;
use std::rc::Rc;

use super::session::{Session, binding};
use crate::mcp::recent::Recent;
use crate::mcp::state::McpState;

/// How many sessions each thread keeps: clients' polls reach a server's threads in turn.
const SLOTS: usize = 8;

struct Slot {
    state: u64,
    username: String,
    path: String,
    sealed: String,
    session: Rc<Session>,
}

/// The session `sealed` names for `username` on `path`, as `Session::open` finds it: kept
/// from an earlier request on this thread, or opened now (and kept when it opens).
pub(super) fn open(
    state: &McpState,
    sealed: &str,
    username: &str,
    path: &str,
) -> Option<Rc<Session>> {
    thread_local! {
        static KEPT: RefCell<Recent<Slot, SLOTS>> = RefCell::new(Recent::default());
    }
    let found = KEPT.with_borrow(|kept| {
        kept.find(|s| {
            s.state == state.id && s.sealed == sealed && s.username == username && s.path == path
        })
        .map(|s| s.session.clone())
    });
    if found.is_some() {
        return found;
    }
    let session = Rc::new(Session::open(state, sealed, &binding(username, path))?);
    KEPT.with_borrow_mut(|kept| {
        kept.keep(Slot {
            state: state.id,
            username: username.to_owned(),
            path: path.to_owned(),
            sealed: sealed.to_owned(),
            session: session.clone(),
        })
    });
    Some(session)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::state::Scratch;
    use serde_json::json;

    fn sealed(state: &McpState, username: &str, path: &str) -> String {
        Session::negotiate("2025-11-25", json!({"tasks": {}}))
            .seal(state, &binding(username, path))
            .unwrap()
    }

    #[tokio::test]
    async fn an_id_is_opened_once_per_caller_and_path() {
        let scratch = Scratch::new();
        let state = &scratch.state;
        let id = sealed(state, "alice", "/mcp");
        let first = open(state, &id, "alice", "/mcp").expect("alice's session");
        assert_eq!(
            Some(&*first),
            Session::open(state, &id, &binding("alice", "/mcp")).as_ref()
        );
        let again = open(state, &id, "alice", "/mcp").unwrap();
        assert!(
            Rc::ptr_eq(&first, &again),
            "the second request reuses the first's session"
        );
        assert!(
            open(state, &id, "bob", "/mcp").is_none(),
            "another caller's id"
        );
        assert!(
            open(state, &id, "alice", "/t/other/mcp").is_none(),
            "another path's id"
        );
        assert!(
            open(state, &format!("{id}x"), "alice", "/mcp").is_none(),
            "a forged id"
        );
    }

    #[tokio::test]
    async fn what_one_server_opened_opens_nothing_on_another() {
        let (a, b) = (Scratch::new(), Scratch::new());
        let (issuer, other) = (&a.state, &b.state);
        let id = sealed(issuer, "alice", "/mcp");
        assert!(open(issuer, &id, "alice", "/mcp").is_some());
        assert!(
            open(other, &id, "alice", "/mcp").is_none(),
            "another server's keys do not open it, on the same thread either"
        );
    }

    #[tokio::test]
    async fn the_oldest_session_makes_way() {
        let scratch = Scratch::new();
        let state = &scratch.state;
        let ids: Vec<_> = (0..=SLOTS)
            .map(|i| sealed(state, &format!("user{i}"), "/mcp"))
            .collect();
        let opened: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| open(state, id, &format!("user{i}"), "/mcp").unwrap())
            .collect();
        let newest = open(state, &ids[SLOTS], &format!("user{SLOTS}"), "/mcp").unwrap();
        assert!(Rc::ptr_eq(&newest, &opened[SLOTS]), "the newest is kept");
        let oldest = open(state, &ids[0], "user0", "/mcp").unwrap();
        assert!(
            !Rc::ptr_eq(&oldest, &opened[0]),
            "the oldest was opened anew"
        );
        assert_eq!(*oldest, *opened[0]);
    }
}
