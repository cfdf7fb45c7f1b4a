//! The web console (`/ui/`): one page and its script, embedded in the binary, that speaks MCP to
//! this endpoint with the person's own bearer token, so it can show and do nothing its user
//! could not over MCP. The MCP Apps view is the same script in one self-contained document.

use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::json;

use super::caller::authenticated;
use super::errors::{TOO_MANY_IN_PROGRESS, busy, too_many};
use super::state::McpState;
use crate::auth::{Resource, Verb};

const SCRIPT: &str = include_str!("../../ui/runway.js");
const STYLE: &str = include_str!("../../ui/runway.css");
const PAGE: &str = include_str!("../../ui/console.html");
const VIEW: &str = include_str!("../../ui/view.html");

/// The console page's policy: its own script and style, requests to its own origin, no frames.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The MCP Apps view: the console's style and script inlined (a host renders one document).
static VIEW_HTML: LazyLock<String> = LazyLock::new(|| {
    VIEW.replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", &SCRIPT.replace("</script", "<\\/script"))
});

/// The MCP Apps view document.
pub(super) fn view_html() -> &'static str {
    &VIEW_HTML
}

/// `/ui/`, its assets, and `/ui/api/namespaces`.
pub(super) fn router(state: Arc<McpState>) -> Router {
    Router::new()
        .route(
            "/ui",
            axum::routing::get(|| async { Redirect::permanent("/ui/") }),
        )
        .route(
            "/ui/",
            axum::routing::get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/ui/runway.js",
            axum::routing::get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/ui/runway.css",
            axum::routing::get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/ui/api/namespaces", axum::routing::get(namespaces))
        .with_state(state)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Assets change with the binary; a browser asks again rather than use a stale copy.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Who the caller is and the namespaces the console may offer them: their own namespace, and
/// every namespace with Workflows where they may `get runs`. An access review per namespace:
/// counted against the endpoint's slots and the caller's share, as an MCP request is.
async fn namespaces(State(state): State<Arc<McpState>>, req: Request) -> Response {
    let Ok(_slot) = state.requests.clone().try_acquire_owned() else {
        return busy();
    };
    let (parts, _) = req.into_parts();
    let (_, identity) = match authenticated(&state, &parts).await {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    let Some(_share) = state.shares.take(
        &identity.principal.username,
        state.config.max_concurrent_requests,
    ) else {
        return too_many(TOO_MANY_IN_PROGRESS);
    };
    let mut candidates = state.workflows.namespaces().await;
    if let Some(own) = &identity.namespace
        && !candidates.contains(own)
    {
        candidates.insert(0, own.clone());
    }
    let mut usable = Vec::new();
    for ns in candidates {
        match state
            .authz
            .allowed(&identity, Verb::Get, Resource::Runs, &ns)
            .await
        {
            Ok(true) => usable.push(ns),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "authorization failed");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({"error": "authorization is unavailable; retry later"})),
                )
                    .into_response();
            }
        }
    }
    let body = json!({
        "user": identity.principal.username,
        "namespace": identity.namespace,
        "namespaces": usable,
    });
    let mut resp = axum::Json(body).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
