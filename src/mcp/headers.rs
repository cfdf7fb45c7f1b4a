//! Checks on what a request carries besides its body: `Host` and `Origin`, the protocol
//! version header, `Mcp-Name` on `tasks/*` and the `Mcp-Param-*` mirrors of arguments.

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
    let Ok(host_authority) = host.parse::<http::uri::Authority>() else {
        return false;
    };
    let port = host_authority.port_u16();
    let host_ok = hosts.iter().any(|allowed| {
        host_authority.host().eq_ignore_ascii_case(&allowed.name)
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
    let own_port = host_authority.port_u16().unwrap_or(default_port);
    if host_authority.host().eq_ignore_ascii_case(&o_host) && own_port == o_port {
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

/// Decode a header value, honouring the `=?base64?…?=` sentinel.
pub(super) fn decode_header_value(v: &str) -> Result<String, String> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = data_encoding::BASE64
                .decode(b64.as_bytes())
                .map_err(|e| format!("invalid base64 header value: {e}"))?;
            String::from_utf8(bytes).map_err(|_| "base64 header value is not UTF-8".to_string())
        }
        None => Ok(v.to_owned()),
    }
}

/// Arguments marked `x-mcp-header` must be mirrored, exactly, in `Mcp-Param-<name>` headers.
pub(super) fn check_param_headers(
    schema: &Value,
    args: &serde_json::Map<String, Value>,
    headers: &HeaderMap,
) -> Result<(), String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (prop, def) in props {
        let Some(suffix) = def.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let header_name = format!("{HEADER_PARAM_PREFIX}{}", suffix.to_ascii_lowercase());
        let header = headers.get(&header_name).map(|v| v.to_str().map(str::trim));
        let body = args.get(prop).filter(|v| !v.is_null()).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        match (body, header) {
            (None, None) => {}
            (_, Some(Err(_))) => return Err(format!("Mcp-Param-{suffix} is not valid text")),
            (Some(_), None) => {
                return Err(format!(
                    "missing header Mcp-Param-{suffix} for argument {prop}"
                ));
            }
            (None, Some(Ok(_))) => {
                return Err(format!(
                    "header Mcp-Param-{suffix} given without argument {prop}"
                ));
            }
            (Some(b), Some(Ok(h))) => {
                if decode_header_value(h)? != b {
                    return Err(format!(
                        "header Mcp-Param-{suffix} does not match argument {prop}"
                    ));
                }
            }
        }
    }
    Ok(())
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
