//! The address fence: which http(s) destinations a fenced [`RepoCache`](super::RepoCache) may
//! fetch from.
//!
//! A repository URI in an operator's resource is untrusted: without a fence, it makes the operator
//! send requests to whatever it can reach — the cloud metadata service (`169.254.169.254`, with
//! the node's credentials), the API server, in-cluster services, its own loopback. So an address
//! that is loopback, private, link-local, carrier-grade NAT, unspecified, multicast, broadcast or
//! reserved (IPv4-mapped and -compatible IPv6 forms included), and the cloud metadata names, are
//! refused unless [`AllowEntry`]s exempt them.
//!
//! The check is on the addresses the connection really uses: the HTTP client resolves names
//! through [`Fence`] (a DNS answer that changes between a check and the connect cannot slip
//! through), IP literals — which never reach a resolver — are checked on the URL, and every
//! redirect hop is checked the same way. Environment proxies are not used by a fenced client: a
//! proxy would connect wherever a name resolves on its side, out of the fence's sight.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use crate::error::FenceRefusal;

/// Redirects one download may follow.
pub const MAX_REDIRECTS: usize = 10;

/// Names of cloud metadata services, refused whatever they resolve to.
const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Why `ip` is fenced, or `None` for a public address.
pub fn fenced_rule(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_rule(v4),
        IpAddr::V6(v6) => v6_rule(v6),
    }
}

fn v4_rule(ip: Ipv4Addr) -> Option<&'static str> {
    Some(match ip.octets() {
        [0, ..] => "unspecified (0.0.0.0/8)",
        [127, ..] => "loopback (127.0.0.0/8)",
        [10, ..] => "private (10.0.0.0/8)",
        [172, 16..=31, ..] => "private (172.16.0.0/12)",
        [192, 168, ..] => "private (192.168.0.0/16)",
        [169, 254, ..] => {
            "link-local (169.254.0.0/16, where cloud metadata services answer at 169.254.169.254)"
        }
        [100, 64..=127, ..] => "carrier-grade NAT (100.64.0.0/10)",
        [255, 255, 255, 255] => "broadcast (255.255.255.255)",
        [224..=239, ..] => "multicast (224.0.0.0/4)",
        [240..=255, ..] => "reserved (240.0.0.0/4)",
        _ => return None,
    })
}

fn v6_rule(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    if let Some(v4) = embedded_v4(ip) {
        return v4_rule(v4);
    }
    let first = ip.segments()[0];
    Some(match first {
        _ if first & 0xfe00 == 0xfc00 => "private (fc00::/7, unique local)",
        _ if first & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        _ if first & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        _ if first & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 address carries where a host or a NAT64 gateway would reach that
/// IPv4 address: IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`,
/// IPv4-compatible `::a.b.c.d` (deprecated) and NAT64's well-known `64:ff9b::a.b.c.d`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..]
        | [0, 0, 0, 0, 0xffff, 0, ..]
        | [0, 0, 0, 0, 0, 0, ..]
        | [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(tail),
        _ => None,
    }
}

/// Why the name `host` is fenced whatever it resolves to, or `None`.
pub fn fenced_name(host: &str) -> Option<&'static str> {
    let host = normalize_host(host);
    METADATA_NAMES
        .contains(&host.as_str())
        .then_some("a cloud metadata service name")
}

fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// An IP network: an address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `addr/prefix`, the host bits cleared (`10.1.2.3/8` is `10.0.0.0/8`).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("prefix /{prefix} is longer than {max} bits"));
        }
        let addr = match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Ok(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                Cidr::new(ip, self.prefix).is_ok_and(|c| c.addr == self.addr)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One destination exempt from the fence: a host name (as the URL names it, matched exactly,
/// case-insensitively; whatever it resolves to is allowed) or a network (an address or a CIDR,
/// matched against the addresses connected to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowEntry {
    Host(String),
    Net(Cidr),
}

const ALLOW_FORMAT: &str = "expected a host name (minio.storage.svc), an IP address (10.0.0.5) \
                            or a CIDR (10.0.0.0/8, fd00::/8)";

impl FromStr for AllowEntry {
    type Err = String;

    fn from_str(entry: &str) -> Result<Self, String> {
        let s = entry.trim();
        let bad = |why: &str| format!("{entry:?}: {why}; {ALLOW_FORMAT}");
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr = IpAddr::from_str(addr).map_err(|_| bad("not an IP address before '/'"))?;
            let prefix = prefix
                .parse::<u8>()
                .map_err(|_| bad("the prefix length is not a number"))?;
            return Cidr::new(addr, prefix)
                .map(AllowEntry::Net)
                .map_err(|e| bad(&e));
        }
        let bare = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = IpAddr::from_str(bare) {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            return Ok(AllowEntry::Net(Cidr::new(ip, prefix).expect("full prefix")));
        }
        let host = normalize_host(s);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
            return Err(bad("not a host name, address or CIDR"));
        }
        Ok(AllowEntry::Host(host))
    }
}

impl std::fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowEntry::Host(h) => f.write_str(h),
            AllowEntry::Net(n) => n.fmt(f),
        }
    }
}

/// The fence with its exemptions; also the HTTP client's resolver.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    allow: Arc<Vec<AllowEntry>>,
}

impl Fence {
    pub fn new(allow: Vec<AllowEntry>) -> Self {
        Fence {
            allow: Arc::new(allow),
        }
    }

    fn allows_host(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.allow
            .iter()
            .any(|e| matches!(e, AllowEntry::Host(h) if *h == host))
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        // `::ffff:127.0.0.1` is `127.0.0.1` to the allow list as to the rules.
        let v4 = match ip {
            IpAddr::V6(v6) if !v6.is_loopback() && !v6.is_unspecified() => {
                embedded_v4(v6).map(IpAddr::V4)
            }
            _ => None,
        };
        self.allow.iter().any(|e| match e {
            AllowEntry::Net(n) => n.contains(ip) || v4.is_some_and(|v4| n.contains(v4)),
            AllowEntry::Host(_) => false,
        })
    }

    /// Checks what the URL itself names: its scheme, an IP literal (connected to without any
    /// resolving) or a refused name. Addresses a name resolves to are checked by [`Self::resolve`].
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), FenceRefusal> {
        let refusal = |host: String, address, rule: &str| FenceRefusal {
            redirected_to: None,
            host,
            address,
            rule: rule.to_string(),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refusal(
                url.host_str().unwrap_or_default().to_string(),
                None,
                "not http(s)",
            ));
        }
        let host = url.host_str().unwrap_or_default().to_string();
        if self.allows_host(&host) {
            return Ok(());
        }
        if host.is_empty() {
            return Err(refusal(host, None, "a URL without a host"));
        }
        // The URL parser has already turned every spelling of an IPv4 address (`0xa9.0xfe…`,
        // `2852039166`) into dotted decimal, and IPv6 literals come bracketed.
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        let Ok(ip) = IpAddr::from_str(literal.unwrap_or(&host)) else {
            return match fenced_name(&host) {
                Some(rule) => Err(refusal(host, None, rule)),
                None => Ok(()),
            };
        };
        match fenced_rule(ip) {
            Some(rule) if !self.allows_ip(ip) => Err(refusal(host, Some(ip), rule)),
            _ => Ok(()),
        }
    }

    /// The addresses of `addrs` (what `host` resolved to) that may be connected to; refused
    /// when none may, naming the first.
    pub fn filter(
        &self,
        host: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, FenceRefusal> {
        if self.allows_host(host) {
            return Ok(addrs);
        }
        if let Some(rule) = fenced_name(host) {
            return Err(FenceRefusal {
                redirected_to: None,
                host: host.to_string(),
                address: None,
                rule: rule.to_string(),
            });
        }
        let mut first_refused = None;
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match fenced_rule(a.ip()) {
                Some(rule) if !self.allows_ip(a.ip()) => {
                    first_refused.get_or_insert((a.ip(), rule));
                    false
                }
                _ => true,
            })
            .collect();
        match (allowed.is_empty(), first_refused) {
            (true, Some((ip, rule))) => Err(FenceRefusal {
                redirected_to: None,
                host: host.to_string(),
                address: Some(ip),
                rule: rule.to_string(),
            }),
            _ => Ok(allowed),
        }
    }

    /// The redirect policy of a fenced client: at most [`MAX_REDIRECTS`] hops, each checked like
    /// the first URL (a name it leads to is then resolved through the fence).
    pub fn redirect_policy(&self) -> reqwest::redirect::Policy {
        let fence = self.clone();
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(TooManyRedirects);
            }
            match fence.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(mut refusal) => {
                    refusal.redirected_to = Some(attempt.url().to_string());
                    attempt.error(refusal)
                }
            }
        })
    }
}

/// A redirect chain longer than [`MAX_REDIRECTS`].
#[derive(Debug)]
pub struct TooManyRedirects;

impl std::fmt::Display for TooManyRedirects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "more than {MAX_REDIRECTS} redirects")
    }
}

impl std::error::Error for TooManyRedirects {}

impl reqwest::dns::Resolve for Fence {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let fence = self.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            // Refused names are not even looked up.
            if !fence.allows_host(&host)
                && let Some(rule) = fenced_name(&host)
            {
                return Err(Box::new(FenceRefusal {
                    redirected_to: None,
                    host,
                    address: None,
                    rule: rule.to_string(),
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed = fence.filter(&host, addrs)?;
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(ip: &str) -> Option<&'static str> {
        fenced_rule(ip.parse().unwrap())
    }

    #[test]
    fn every_fenced_range_is_refused_and_public_addresses_pass() {
        for (ip, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.0.0.1", "private (10."),
            ("172.16.0.1", "private (172.16."),
            ("172.31.255.255", "private (172.16."),
            ("192.168.1.1", "private (192.168."),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.254", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("224.0.0.251", "multicast"),
            ("239.255.255.250", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("::1", "loopback (::1)"),
            ("::", "unspecified (::)"),
            ("fc00::1", "private (fc00::/7"),
            ("fd00:ec2::254", "private (fc00::/7"),
            ("fe80::1", "link-local (fe80::/10)"),
            ("febf::1", "link-local (fe80::/10)"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast (ff00::/8)"),
            // IPv4 inside IPv6: mapped, translated, compatible, NAT64.
            ("::ffff:169.254.169.254", "link-local (169.254."),
            ("::ffff:a9fe:a9fe", "link-local (169.254."),
            ("::ffff:127.0.0.1", "loopback (127."),
            ("::ffff:0:10.0.0.1", "private (10."),
            ("::10.0.0.1", "private (10."),
            ("64:ff9b::169.254.169.254", "link-local (169.254."),
        ] {
            let got = rule(ip).unwrap_or_else(|| panic!("{ip} passed the fence"));
            assert!(got.starts_with(expected), "{ip}: {got}");
        }
        for ip in [
            "1.1.1.1",
            "140.82.112.3",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "192.169.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2001:db8::1",
            "::ffff:140.82.112.3",
            "64:ff9b::8.8.8.8",
        ] {
            assert_eq!(rule(ip), None, "{ip}");
        }
        assert_eq!(
            fenced_name("Metadata.Google.Internal."),
            Some("a cloud metadata service name")
        );
        assert_eq!(fenced_name("github.com"), None);
    }

    #[test]
    fn urls_are_checked_by_literal_and_name() {
        let fence = Fence::default();
        let check = |u: &str| fence.check_url(&reqwest::Url::parse(u).unwrap());
        let e = check("http://169.254.169.254/latest/meta-data.tar.gz").unwrap_err();
        assert_eq!(
            (e.host.as_str(), e.address, e.rule.starts_with("link-local")),
            (
                "169.254.169.254",
                Some("169.254.169.254".parse().unwrap()),
                true
            )
        );
        assert!(
            e.to_string().starts_with(
                "169.254.169.254 is link-local (169.254.0.0/16, where cloud metadata services answer at 169.254.169.254); \
                 repositories are fetched from public addresses only (to allow this destination, start the generic \
                 operator with --allow-fetch-from 169.254.169.254"
            ),
            "{e}"
        );
        // URL parsing normalises the other spellings of an IPv4 address.
        assert!(check("http://0xa9.0xfe.0xa9.0xfe/x").is_err());
        assert!(check("http://2852039166/x").is_err());
        assert!(check("http://[::ffff:169.254.169.254]/x").is_err());
        let e = check("http://metadata.google.internal/computeMetadata/v1/").unwrap_err();
        assert_eq!(
            e.to_string().split(';').next().unwrap(),
            "metadata.google.internal is a cloud metadata service name"
        );
        // Names are resolved through the fence, not judged by the URL.
        assert_eq!(
            check("https://github.com/kubeflow/manifests/archive/v1.0.2.tar.gz"),
            Ok(())
        );
    }

    #[test]
    fn the_allow_list_matches_hosts_and_networks() {
        let entries: Vec<AllowEntry> = [
            "minio.Storage.svc.",
            "10.1.0.0/16",
            "127.0.0.1",
            "[fd00::5]",
        ]
        .iter()
        .map(|e| e.parse().unwrap())
        .collect();
        assert_eq!(
            entries.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "minio.storage.svc",
                "10.1.0.0/16",
                "127.0.0.1/32",
                "fd00::5/128"
            ]
        );
        let fence = Fence::new(entries);
        let check = |u: &str| fence.check_url(&reqwest::Url::parse(u).unwrap());
        assert_eq!(check("http://10.1.200.3/a.tar.gz"), Ok(()));
        assert_eq!(check("http://[::ffff:10.1.0.9]/a.tar.gz"), Ok(()));
        assert_eq!(check("http://127.0.0.1:8080/a.tar.gz"), Ok(()));
        assert_eq!(check("http://[fd00::5]/a.tar.gz"), Ok(()));
        assert!(check("http://10.2.0.1/a.tar.gz").is_err());
        assert!(check("http://127.0.0.2/a.tar.gz").is_err());
        assert!(check("http://[fd00::6]/a.tar.gz").is_err());

        let addr = |s: &str| SocketAddr::new(s.parse().unwrap(), 0);
        // An allowed name may resolve anywhere; another name only to public or allowed addresses.
        assert_eq!(
            fence.filter("MINIO.storage.svc", vec![addr("10.9.9.9")]),
            Ok(vec![addr("10.9.9.9")])
        );
        assert_eq!(
            fence.filter(
                "other.svc",
                vec![addr("10.1.2.3"), addr("10.9.9.9"), addr("1.1.1.1")]
            ),
            Ok(vec![addr("10.1.2.3"), addr("1.1.1.1")])
        );
        let e = fence
            .filter(
                "rebind.example",
                vec![addr("169.254.169.254"), addr("10.9.9.9")],
            )
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rebind.example resolves to 169.254.169.254, which is link-local"),
            "{e}"
        );
        assert!(
            e.to_string().contains("--allow-fetch-from rebind.example"),
            "{e}"
        );
        assert!(
            Fence::default()
                .filter("localhost", vec![addr("127.0.0.1"), addr("::1")])
                .is_err()
        );

        for bad in [
            "",
            "10.0.0.0/33",
            "10.0.0.0/x",
            "nope/8",
            "a b",
            "http://x",
            "a..b",
        ] {
            let e = bad.parse::<AllowEntry>().unwrap_err();
            assert!(e.contains("expected a host name"), "{bad}: {e}");
        }
    }
}
