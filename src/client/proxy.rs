//! Which proxy, if any, requests to the API server go through, decided as
//! client-go decides it (Go's `http.ProxyFromEnvironment`): a kubeconfig's
//! `proxy-url` wins; else `HTTPS_PROXY` for an `https` server and
//! `HTTP_PROXY` for an `http` one (upper or lower case), unless `NO_PROXY`
//! names the host (a host, a domain and its subdomains, an IP, a CIDR, `*`)
//! or the host is loopback, which Go never proxies. A Client talks to one
//! server, so the decision is made once.

use std::fmt;
use std::net::IpAddr;

use super::failure::shown_url;

/// Where a [`super::ClientConfig`] sends its requests.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) enum ProxyChoice {
    /// As the environment says (client-go's default, in a pod too).
    #[default]
    Environment,
    /// Straight to the server.
    Direct,
    /// Through this proxy (`http://`, `https://`).
    Url(String),
}

/// A proxy URL may carry a password (`http://user:password@proxy:3128`):
/// shown without it.
impl fmt::Debug for ProxyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyChoice::Environment => f.write_str("Environment"),
            ProxyChoice::Direct => f.write_str("Direct"),
            ProxyChoice::Url(url) => f.debug_tuple("Url").field(&shown_url(url)).finish(),
        }
    }
}

/// The proxy URL for a server at `host:port` over `https` or not, or `None`
/// for a direct connection. `env` reads an environment variable.
pub(crate) fn choose(
    choice: &ProxyChoice,
    https: bool,
    host: &str,
    port: u16,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    match choice {
        ProxyChoice::Direct => None,
        ProxyChoice::Url(url) => Some(url.clone()),
        ProxyChoice::Environment => {
            let var = |upper: &str| {
                env(upper)
                    .or_else(|| env(&upper.to_ascii_lowercase()))
                    .filter(|v| !v.is_empty())
            };
            let proxy = var(if https { "HTTPS_PROXY" } else { "HTTP_PROXY" })?;
            if !use_proxy(host, port, var("NO_PROXY").as_deref().unwrap_or("")) {
                return None;
            }
            // Go reads a bare `host:port` as an http proxy.
            Some(if proxy.contains("://") {
                proxy
            } else {
                format!("http://{proxy}")
            })
        }
    }
}

/// Go's `httpproxy.Config.useProxy`.
fn use_proxy(host: &str, port: u16, no_proxy: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if host == "localhost" {
        return false;
    }
    let ip = host.parse::<IpAddr>().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    for entry in no_proxy.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let entry = entry.to_ascii_lowercase();
        if entry == "*" {
            return false;
        }
        if let Some((net, bits)) = entry.split_once('/') {
            if let (Some(ip), Ok(net), Ok(bits)) = (ip, net.parse::<IpAddr>(), bits.parse::<u8>()) {
                if in_cidr(ip, net, bits) {
                    return false;
                }
            }
            continue;
        }
        if let (Some(ip), Ok(entry_ip)) = (ip, entry.trim_matches(['[', ']']).parse::<IpAddr>()) {
            if ip == entry_ip {
                return false;
            }
            continue;
        }
        // `domain[:port]`; a leading dot or none both match subdomains.
        let (name, entry_port) = match entry.rsplit_once(':') {
            Some((n, p)) if p.bytes().all(|b| b.is_ascii_digit()) => (n, p.parse::<u16>().ok()),
            _ => (entry.as_str(), None),
        };
        if entry_port.is_some_and(|p| p != port) {
            continue;
        }
        let name = name.trim_start_matches("*.").trim_start_matches('.');
        if host == name || host.ends_with(&format!(".{name}")) {
            return false;
        }
    }
    true
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_scheme_picks_the_variable_and_loopback_is_never_proxied() {
        let e = env(&[
            ("HTTPS_PROXY", "proxy:3128"),
            ("http_proxy", "http://p2:8080"),
        ]);
        let c = ProxyChoice::Environment;
        assert_eq!(
            choose(&c, true, "api.example", 6443, &e).as_deref(),
            Some("http://proxy:3128")
        );
        assert_eq!(
            choose(&c, false, "api.example", 80, &e).as_deref(),
            Some("http://p2:8080")
        );
        for host in ["127.0.0.1", "localhost", "[::1]", "127.1.2.3"] {
            assert_eq!(choose(&c, true, host, 6443, &e), None, "{host}");
        }
        assert_eq!(
            choose(&ProxyChoice::Direct, true, "api.example", 1, &e),
            None
        );
        let url = ProxyChoice::Url("http://kubeconfig-proxy:1".into());
        assert_eq!(
            choose(&url, true, "127.0.0.1", 1, &e).as_deref(),
            Some("http://kubeconfig-proxy:1")
        );
    }

    #[test]
    fn debug_shows_no_proxy_password() {
        let choice = ProxyChoice::Url("http://alice:Pr0xyS3cret@127.0.0.1:3128".into());
        assert_eq!(format!("{choice:?}"), r#"Url("http://***@127.0.0.1:3128")"#);
        assert_eq!(format!("{:?}", ProxyChoice::Direct), "Direct");
    }

    #[test]
    fn no_proxy_matches_hosts_domains_ips_and_cidrs_as_go_does() {
        let np = "internal.example, .corp, 10.0.0.0/8, 192.168.1.7, fd00::/8, api.other:6443";
        for (host, port, proxied) in [
            ("internal.example", 443, false),
            ("a.internal.example", 443, false),
            ("notinternal.example", 443, true),
            ("corp", 443, false),
            ("x.corp", 443, false),
            ("10.1.2.3", 443, false),
            ("11.1.2.3", 443, true),
            ("192.168.1.7", 443, false),
            ("192.168.1.8", 443, true),
            ("[fd00::1]", 443, false),
            ("api.other", 6443, false),
            ("api.other", 443, true),
        ] {
            assert_eq!(use_proxy(host, port, np), proxied, "{host}:{port}");
        }
        assert!(!use_proxy("anything", 1, "*"));
    }
}
