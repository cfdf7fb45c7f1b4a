//! Who is calling and in which namespace: Host and Origin, the path's namespace, the bearer
//! token; and the tenant the gate attached, as rmcp's handler reads it back.

use std::sync::Arc;
use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rmcp::RoleServer;
use rmcp::model::ErrorData;
use rmcp::service::RequestContext;
use serde_json::Value;

use super::errors::{err, rpc_error, too_many};
use super::headers::host_and_origin_allowed;
use super::state::{McpState, Tenant};
use crate::auth::connection::LastToken;
use crate::auth::{AuthError, Identity};
use crate::protocol::codes;

/// The tenant the gate attached to a request handed to rmcp.
pub(super) fn tenant(ctx: &RequestContext<RoleServer>) -> Result<Tenant, ErrorData> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Tenant>())
        .cloned()
        .ok_or_else(|| err(codes::UNAUTHENTICATED, "unauthenticated", None))
}

pub(super) fn path_namespace(path: &str) -> Option<&str> {
    path.strip_prefix("/namespaces/")?.strip_suffix("/mcp")
}

pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// [`caller`] for a request from a client address that has not used up its failed
/// authentications, counting a failure against that address: every endpoint that
/// authenticates goes through here, so no endpoint is a free token oracle.
pub(super) async fn authenticated(
    state: &McpState,
    parts: &http::request::Parts,
) -> Result<(Option<String>, Arc<Identity>), Response> {
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    if peer.is_some_and(|ip| state.auth_failures.blocked(ip)) {
        return Err(too_many(
            "too many failed authentications from this address; retry later",
        ));
    }
    let last = parts.extensions.get::<Arc<LastToken>>().map(Arc::as_ref);
    let refused = match caller(state, &parts.headers, parts.uri.path(), last).await {
        Ok(c) => return Ok(c),
        Err(refused) => refused,
    };
    if refused.status() == StatusCode::UNAUTHORIZED
        && let Some(ip) = peer
    {
        state.auth_failures.failed(ip);
    }
    Err(refused)
}

/// Who is calling, and which namespace the path names, from headers and path alone: Host and
/// Origin allowed, the path's namespace a DNS label, the bearer token accepted — by the
/// connection's `last` token while its answer lasts, else by the authenticator.
async fn caller(
    state: &McpState,
    headers: &HeaderMap,
    path: &str,
    last: Option<&LastToken>,
) -> Result<(Option<String>, Arc<Identity>), Response> {
    if !host_and_origin_allowed(headers, &state.hosts, &state.origins) {
        return Err(rpc_error(
            StatusCode::FORBIDDEN,
            Value::Null,
            codes::INVALID_REQUEST,
            "Forbidden: Host or Origin header is not allowed",
        ));
    }
    let path_ns = match path_namespace(path) {
        Some(ns) if crate::api::is_dns_label(ns) => Some(ns.to_owned()),
        Some(_) => {
            return Err(rpc_error(
                StatusCode::NOT_FOUND,
                Value::Null,
                codes::INVALID_REQUEST,
                "the path's namespace is not a valid namespace name",
            ));
        }
        None => None,
    };
    let token = bearer(headers);
    if let (Some(token), Some(last)) = (token, last)
        && let Some(identity) = last.identity(&state.authn, token, Instant::now)
    {
        return Ok((path_ns, identity));
    }
    match state.authn.authenticate_until(token).await {
        Ok((identity, until)) => {
            if let (Some(token), Some(last), Some(until)) = (token, last, until) {
                last.remember(&state.authn, token, Arc::clone(&identity), until);
            }
            Ok((path_ns, identity))
        }
        Err(AuthError::Unauthenticated(why)) => {
            let mut resp = rpc_error(
                StatusCode::UNAUTHORIZED,
                Value::Null,
                codes::UNAUTHENTICATED,
                &format!("unauthenticated: {why}"),
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"runway\""),
            );
            Err(resp)
        }
        Err(e) => {
            tracing::warn!(error = %e, "authentication failed");
            Err(rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                Value::Null,
                codes::INTERNAL_ERROR,
                "authentication is unavailable; retry later",
            ))
        }
    }
}
