//! Checks on what a request carries besides its body: `Host` and `Origin`, the protocol
//! version header, `Mcp-Name` on `tasks/*` and the `Mcp-Param-*` mirrors of arguments.

use axum::http::header::ToStrError;
use axum::http::{HeaderMap, header};
use serde_json::Value;

use super::caps::declares_tasks_in;
use crate::protocol::{HEADER_NAME, HEADER_PARAM_PREFIX, HEADER_PROTOCOL_VERSION};

/// An entry of the allowed hosts: a name, for any port or for one.
pub(super) struct AllowedHost {
    name: String,
    port: Option<u16>,
}

impl AllowedHost {
    pub(super) fn new(allowed: &str) -> Self {
        let allowed = allowed.to_ascii_lowercase();
        match allowed.parse::<http::uri::Authority>() {
            Ok(a) => Self {
                name: a.host().to_owned(),
                port: a.port_u16(),
            },
            Err(_) => Self {
                name: allowed,
                port: None,
            },
        }
    }
}

/// A `Host` header's name and port as `http::uri::Authority` reads them. Every request has
/// one, and nearly always a plain `name[:port]`, which is split in place; anything else is
/// read by `Authority` itself (which copies it).
fn split_host(host: &str) -> Option<(std::borrow::Cow<'_, str>, Option<u16>)> {
    let plain = |name: &str| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    };
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let digits = |p: &str| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    match port {
        None if plain(name) => return Some((name.into(), None)),
        Some(p) if plain(name) && digits(p) => {
            if let Ok(p) = p.parse::<u16>() {
                return Some((name.into(), Some(p)));
            }
        }
        _ => {}
    }
    let a = host.parse::<http::uri::Authority>().ok()?;
    Some((a.host().to_owned().into(), a.port_u16()))
}

/// Whether `Host` and `Origin` are allowed (the DNS-rebinding and cross-origin checks). The
/// gate applies them to every request, also those it answers itself (`subscriptions/listen`).
pub(super) fn host_and_origin_allowed(
    headers: &HeaderMap,
    hosts: &[AllowedHost],
    origins: &[String],
) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Some((host_name, port)) = split_host(host) else {
        return false;
    };
    let host_ok = hosts.iter().any(|allowed| {
        host_name.eq_ignore_ascii_case(&allowed.name)
            && (allowed.port.is_none() || allowed.port == port)
    });
    if !host_ok {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(origin) = origin
        .to_str()
        .ok()
        .and_then(|o| o.parse::<http::Uri>().ok())
    else {
        return false;
    };
    let (Some(scheme), Some(authority)) = (origin.scheme_str(), origin.authority()) else {
        return false;
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    let o_host = authority.host().to_ascii_lowercase();
    let o_port = authority.port_u16().unwrap_or(default_port);
    // The server's own pages (the console): the Origin names the very Host the request was
    // sent to, which is an allowed one, so neither a foreign page nor a rebound name gets in.
    let own_port = port.unwrap_or(default_port);
    if host_name.eq_ignore_ascii_case(&o_host) && own_port == o_port {
        return true;
    }
    origins.iter().any(|allowed| {
        let allowed = allowed.to_ascii_lowercase();
        let (base, any_port) = match allowed.strip_suffix(":*") {
            Some(b) => (b.to_owned(), true),
            None => (allowed.clone(), false),
        };
        let Ok(uri) = base.parse::<http::Uri>() else {
            return false;
        };
        let (Some(s), Some(a)) = (uri.scheme_str(), uri.authority()) else {
            return false;
        };
        let port = a.port_u16().unwrap_or(if s == "https" { 443 } else { 80 });
        s == scheme && a.host() == o_host && (any_port || port == o_port)
    })
}

/// The value of a header sent exactly once, as text; `None` when it is missing, repeated or
/// not visible ASCII.
pub(super) fn only(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// Why a header value in the `=?base64?…?=` form cannot be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum HeaderValueError {
    /// The part between the markers is not Base64.
    #[error("invalid base64 header value: {0}")]
    Base64(#[source] data_encoding::DecodeError),
    /// It decodes to bytes that are not UTF-8.
    #[error("base64 header value is not UTF-8")]
    NotUtf8(#[source] std::string::FromUtf8Error),
}

/// Decode a header value, honouring the `=?base64?…?=` sentinel.
pub(super) fn decode_header_value(v: &str) -> Result<String, HeaderValueError> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = data_encoding::BASE64
                .decode(b64.as_bytes())
                .map_err(HeaderValueError::Base64)?;
            String::from_utf8(bytes).map_err(HeaderValueError::NotUtf8)
        }
        None => Ok(v.to_owned()),
    }
}

/// Why the `Mcp-Param-*` headers of a call do not mirror its arguments; the message names the
/// header.
#[derive(Debug, thiserror::Error)]
pub(super) enum ParamHeaderError {
    /// The header's value is not visible ASCII.
    #[error("Mcp-Param-{suffix} is not valid text")]
    NotText {
        /// The header's name after `Mcp-Param-`.
        suffix: String,
        /// Why its value is not text.
        #[source]
        source: ToStrError,
    },
    /// The header is given more than once.
    #[error("header Mcp-Param-{suffix} given more than once")]
    Repeated {
        /// The header's name after `Mcp-Param-`.
        suffix: String,
    },
    /// The argument is given and its header is not.
    #[error("missing header Mcp-Param-{suffix} for argument {argument}")]
    Missing {
        /// The header's name after `Mcp-Param-`.
        suffix: String,
        /// The argument it mirrors.
        argument: String,
    },
    /// The header is given and its argument is not.
    #[error("header Mcp-Param-{suffix} given without argument {argument}")]
    WithoutArgument {
        /// The header's name after `Mcp-Param-`.
        suffix: String,
        /// The argument it mirrors.
        argument: String,
    },
    /// The header's value is in the Base64 form and cannot be decoded.
    #[error(transparent)]
    Value(#[from] HeaderValueError),
    /// The header says something else than the argument.
    #[error("header Mcp-Param-{suffix} does not match argument {argument}")]
    Mismatch {
        /// The header's name after `Mcp-Param-`.
        suffix: String,
        /// The argument it mirrors.
        argument: String,
    },
}

/// Arguments marked `x-mcp-header` must be mirrored, exactly, in `Mcp-Param-<name>` headers.
pub(super) fn check_param_headers(
    schema: &Value,
    args: &serde_json::Map<String, Value>,
    headers: &HeaderMap,
) -> Result<(), ParamHeaderError> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (prop, def) in props {
        let Some(suffix) = def.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let header_name = format!("{HEADER_PARAM_PREFIX}{}", suffix.to_ascii_lowercase());
        let mut values = headers.get_all(&header_name).iter();
        let header = values.next().map(|v| v.to_str().map(str::trim));
        // An intermediary may route on either value: which one the argument must match is
        // not the server's to pick.
        if values.next().is_some() {
            let suffix = suffix.to_owned();
            return Err(ParamHeaderError::Repeated { suffix });
        }
        let body = args.get(prop).filter(|v| !v.is_null()).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        // Only a refusal needs the names as its own.
        let names = || (suffix.to_owned(), prop.clone());
        match (body, header) {
            (None, None) => {}
            (_, Some(Err(source))) => {
                let suffix = suffix.to_owned();
                return Err(ParamHeaderError::NotText { suffix, source });
            }
            (Some(_), None) => {
                let (suffix, argument) = names();
                return Err(ParamHeaderError::Missing { suffix, argument });
            }
            (None, Some(Ok(_))) => {
                let (suffix, argument) = names();
                return Err(ParamHeaderError::WithoutArgument { suffix, argument });
            }
            (Some(b), Some(Ok(h))) => {
                if decode_header_value(h)? != b {
                    let (suffix, argument) = names();
                    return Err(ParamHeaderError::Mismatch { suffix, argument });
                }
            }
        }
    }
    Ok(())
}

/// The media ranges `Accept` lists, without their parameters; a range weighted `q=0` is
/// refused by the client, so it is left out.
fn accepted(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    let ranges = headers.get_all(header::ACCEPT).into_iter();
    let ranges = ranges
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    ranges.filter_map(|range| {
        let mut parts = range.split(';');
        let essence = parts.next()?.trim();
        let refused = parts.any(|p| {
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("q") && weighs_nothing(v.trim())
            })
        });
        (!refused).then_some(essence)
    })
}

/// Whether a weight is zero as RFC 9110 writes it (`0`, `0.`, `0.0` to `0.000`); a weight
/// outside that grammar is not taken for a refusal, as rmcp does not.
fn weighs_nothing(q: &str) -> bool {
    q == "0"
        || q.strip_prefix("0.")
            .is_some_and(|f| f.len() <= 3 && f.bytes().all(|b| b == b'0'))
}

/// Why a POST that rmcp does not see (a `subscriptions/listen`) cannot be served as rmcp
/// would refuse it: `Accept` must list JSON and SSE (406), the body must be JSON (415).
pub(super) fn media_refusal(headers: &HeaderMap) -> Option<(http::StatusCode, &'static str)> {
    let (mut json, mut sse) = (false, false);
    for essence in accepted(headers) {
        json |= essence.eq_ignore_ascii_case("application/json");
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    if !(json && sse) {
        return Some((
            http::StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ));
    }
    let content_type = only(headers, header::CONTENT_TYPE).unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    (!essence.eq_ignore_ascii_case("application/json")).then_some((
        http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "Unsupported Media Type: Content-Type must be application/json",
    ))
}

/// Mark an SSE answer as one a reverse proxy must pass on as it comes (nginx buffers a
/// response whole otherwise, and a notification would reach the client late or in bursts),
/// as rmcp marks its own streams.
pub(super) fn no_proxy_buffering(resp: &mut axum::response::Response) {
    resp.headers_mut().insert(
        header::HeaderName::from_static("x-accel-buffering"),
        header::HeaderValue::from_static("no"),
    );
}

/// An `MCP-Protocol-Version` header, when sent, is not empty.
pub(super) fn protocol_headers(headers: &HeaderMap) -> Result<(), &'static str> {
    let version = headers
        .get(HEADER_PROTOCOL_VERSION)
        .map(|v| v.to_str().unwrap_or_default().trim());
    match version {
        Some("") => Err("empty MCP-Protocol-Version header"),
        _ => Ok(()),
    }
}

/// Whether a `tasks/*` request declares the Tasks extension and its `Mcp-Name` header (when
/// sent) names the task of the body.
pub(super) fn task_headers_agree(headers: &HeaderMap, params: Option<&Value>) -> bool {
    let task_id = params.and_then(|p| p.get("taskId")).and_then(Value::as_str);
    // The header may carry the name in its Base64 form (`=?base64?…?=`).
    let header_name = headers
        .get(HEADER_NAME)
        .and_then(|v| v.to_str().ok())
        .map(|v| decode_header_value(v.trim()));
    let names_agree = match (task_id, header_name) {
        (Some(id), Some(Ok(name))) => id == name,
        (_, Some(Err(_))) => false,
        _ => true,
    };
    declares_tasks_in(params) && names_agree
}

#[cfg(test)]
mod host_tests {
    use super::split_host;

    #[test]
    fn a_host_is_split_as_an_authority_reads_it() {
        for host in [
            "localhost",
            "localhost:8080",
            "LocalHost:80",
            "127.0.0.1:9",
            "[::1]:8080",
            "[::1]",
            "runway.runway-system.svc",
            "a.b:65535",
            "a.b:65536",
            "a.b:",
            "a.b:0080",
            "user@host:1",
            "under_score:1",
            "",
            ":80",
            "a b",
        ] {
            let ours = split_host(host).map(|(h, p)| (h.into_owned(), p));
            let theirs = host
                .parse::<http::uri::Authority>()
                .ok()
                .map(|a| (a.host().to_owned(), a.port_u16()));
            assert_eq!(ours, theirs, "{host:?}");
        }
    }
}

#[cfg(test)]
mod media_tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            header::HeaderValue::from_str(value).unwrap(),
        );
        h.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        h
    }

    #[test]
    fn only_a_weight_of_zero_refuses_a_media_type() {
        for refused in ["0", "0.", "0.0", "0.000"] {
            let value = format!("application/json, text/event-stream;q={refused}");
            assert!(media_refusal(&accept(&value)).is_some(), "q={refused}");
        }
        // Weights outside RFC 9110's grammar are not refusals (as rmcp reads them).
        for kept in ["1", "0.5", "00", ".0", "0.0000", "abc"] {
            let value = format!("application/json, text/event-stream;q={kept}");
            assert!(media_refusal(&accept(&value)).is_none(), "q={kept}");
        }
    }
}
