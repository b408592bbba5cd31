//! Where a confined process may connect, by name: [`HostList`], the one syntax of every way
//! out (`[sandbox.network] allow` and `deny`, a WebAssembly component's `http_hosts`).
//!
//! An entry is a host name or an IP address, optionally with a port (`api.example.com`,
//! `127.0.0.1:8080`, `[::1]:8080`), or a wildcard for the subdomains of a name
//! (`*.example.com`, which does not match `example.com` itself). An entry without a port
//! allows the default ports of the way out that reads it (443 and 80 for the egress
//! proxy; the request's scheme's port for a component's HTTP). Names are compared without
//! case and without a trailing dot, as the request gives them, before they are resolved.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of hosts. An entry is a host name or an IP address, optionally with a port
/// (`api.example.com`, `127.0.0.1:8080`, `[::1]:8080`), or a wildcard for the subdomains of
/// a name (`*.example.com`, which does not match `example.com` itself). Names are compared
/// without case and without a trailing dot, as the request gives them, before they are
/// resolved. Empty: nothing matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostList {
    entries: Vec<HostEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostEntry {
    /// The name or address, lowercase, without brackets or a trailing dot.
    host: String,
    /// `*.host`: any name ending in `.host`.
    subdomains: bool,
    port: Option<u16>,
}

impl HostList {
    /// No host.
    pub fn none() -> HostList {
        HostList::default()
    }

    /// Parses the entries; an entry that is not a host (a URL, a path, a bad port, `*`
    /// alone) is an error that quotes it and says how to write it.
    pub fn new<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Result<HostList, String> {
        let entries = entries
            .into_iter()
            .map(|e| HostEntry::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(HostList { entries })
    }

    /// This list and `other`'s entries.
    pub fn and(mut self, other: &HostList) -> HostList {
        for entry in &other.entries {
            if !self.entries.contains(entry) {
                self.entries.push(entry.clone());
            }
        }
        self
    }

    /// Whether no host is listed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `host` (a name or an address, as the request gives it) on `port` matches an
    /// entry; an entry without a port matches `default_ports`.
    pub fn matches(&self, host: &str, port: u16, default_ports: &[u16]) -> bool {
        let host = normalized(host);
        self.entries.iter().any(|e| {
            let name = if e.subdomains {
                host.strip_suffix(e.host.as_str())
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.'))
            } else {
                host == e.host
            };
            name && e.port.map_or(default_ports.contains(&port), |p| p == port)
        })
    }

    /// Whether the address `ip` on `port` is listed by address (not by a name that
    /// resolves to it).
    pub fn lists_address(&self, ip: IpAddr, port: u16, default_ports: &[u16]) -> bool {
        self.entries.iter().any(|e| {
            !e.subdomains
                && e.host.parse::<IpAddr>().is_ok_and(|listed| {
                    canonical(listed) == canonical(ip)
                        && e.port.map_or(default_ports.contains(&port), |p| p == port)
                })
        })
    }

    /// The entries, written out (`api.example.com`, `*.cdn.example:8443`).
    pub fn entries(&self) -> Vec<String> {
        self.entries.iter().map(HostEntry::to_string).collect()
    }
}

impl fmt::Display for HostList {
    /// The entries, comma-separated, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.entries().join(", "))
    }
}

impl Serialize for HostList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.entries().serialize(s)
    }
}

impl<'de> Deserialize<'de> for HostList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entries = Vec::<String>::deserialize(d)?;
        HostList::new(&entries).map_err(serde::de::Error::custom)
    }
}

impl HostEntry {
    fn parse(entry: &str) -> Result<HostEntry, String> {
        let bad = |why: &str| Err(format!("host entry '{entry}': {why}"));
        let text = entry.trim();
        if text.is_empty() {
            return bad("empty; write a host name such as 'api.example.com'");
        }
        if text.contains("://") {
            return bad(
                "write the host only, without a scheme ('api.example.com', or 'api.example.com:8443' for another port)",
            );
        }
        if text.contains(['/', '?', '#', '@', ' ']) {
            return bad("write the host only, without a path, query or user");
        }
        let (host, port) = match split_port(text) {
            Ok(split) => split,
            Err(why) => return bad(&why),
        };
        let (host, subdomains) = match host.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (host, false),
        };
        if host.is_empty() || host == "*" || host.contains('*') {
            return bad(
                "every host cannot be allowed; list the hosts (a '*.' prefix allows the subdomains of one name)",
            );
        }
        Ok(HostEntry {
            host: normalized(host),
            subdomains,
            port,
        })
    }
}

impl fmt::Display for HostEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subdomains {
            f.write_str("*.")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// `host[:port]` or `[v6][:port]`, split.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .map(Some)
            .ok_or_else(|| format!("'{p}' is not a port (1 to 65535)"))
    };
    if let Some(rest) = text.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err("an IPv6 address opened with '[' must close with ']'".into());
        };
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, port(p)?)),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("unexpected '{after}' after the address")),
        };
    }
    match text.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => {
            Err("write an IPv6 address in brackets ('[::1]:8080')".into())
        }
        Some((host, p)) => Ok((host, port(p)?)),
        None => Ok((text, None)),
    }
}

fn normalized(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is an address that only a name listed by address may reach: loopback,
/// private ranges (RFC 1918, unique local, shared address space), link-local (the cloud
/// metadata address 169.254.169.254 among them), unspecified, multicast, broadcast,
/// documentation and reserved ranges.
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                // 0.0.0.0/8, shared address space 100.64.0.0/10, 192.0.0.0/24, 240.0.0.0/4
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0)
                || a >= 240
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // unique local fc00::/7, link-local fe80::/10, site-local fec0::/10
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
                // documentation 2001:db8::/32
                || (first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_their_host_on_the_default_ports_or_their_own() {
        let hosts = HostList::new([
            "api.example.com",
            "127.0.0.1:8080",
            "*.cdn.example.org",
            "[::1]:9000",
            "Upper.Example.NET.",
        ])
        .unwrap();
        let web = [443, 80];
        let table: &[(&str, u16, bool)] = &[
            ("api.example.com", 443, true),
            ("API.example.com.", 80, true),
            ("api.example.com", 8443, false),
            ("example.com", 443, false),
            ("evil-api.example.com", 443, false),
            ("127.0.0.1", 8080, true),
            ("127.0.0.1", 80, false),
            ("a.cdn.example.org", 443, true),
            ("a.b.cdn.example.org", 443, true),
            ("cdn.example.org", 443, false),
            ("xcdn.example.org", 443, false),
            ("[::1]", 9000, true),
            ("upper.example.net", 443, true),
        ];
        for (host, port, allowed) in table {
            assert_eq!(
                hosts.matches(host, *port, &web),
                *allowed,
                "{host}:{port} with {hosts}"
            );
        }
    }

    #[test]
    fn an_entry_that_is_not_a_host_is_refused_naming_it() {
        for (entry, says) in [
            ("https://api.example.com", "without a scheme"),
            ("api.example.com/v1", "without a path"),
            ("*", "every host cannot be allowed"),
            ("*.", "every host cannot be allowed"),
            ("a.*.example.com", "every host cannot be allowed"),
            ("example.com:0", "not a port"),
            ("example.com:http", "not a port"),
            ("::1", "in brackets"),
            ("[::1", "must close"),
            ("", "empty"),
        ] {
            let e = HostList::new([entry]).unwrap_err();
            assert!(e.contains(entry) && e.contains(says), "{entry}: {e}");
        }
    }

    #[test]
    fn an_address_is_listed_only_by_address() {
        let hosts = HostList::new(["localhost:8080", "127.0.0.1:8080", "[::1]"]).unwrap();
        let web = [443, 80];
        assert!(hosts.lists_address("127.0.0.1".parse().unwrap(), 8080, &web));
        assert!(hosts.lists_address("::ffff:127.0.0.1".parse().unwrap(), 8080, &web));
        assert!(!hosts.lists_address("127.0.0.1".parse().unwrap(), 9090, &web));
        assert!(hosts.lists_address("::1".parse().unwrap(), 443, &web));
        assert!(!hosts.lists_address("10.0.0.1".parse().unwrap(), 8080, &web));
    }

    #[test]
    fn internal_addresses_are_told_apart_from_public_ones() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:169.254.169.254",
            "::",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn a_list_reads_and_writes_as_strings() {
        let hosts: HostList = serde_json::from_str(r#"["a.example", "*.b.example:8443"]"#).unwrap();
        assert_eq!(
            serde_json::to_string(&hosts).unwrap(),
            r#"["a.example","*.b.example:8443"]"#
        );
        let e = serde_json::from_str::<HostList>(r#"["http://x"]"#).unwrap_err();
        assert!(e.to_string().contains("without a scheme"), "{e}");
    }
}
