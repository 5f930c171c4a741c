//! The unit tests of `super`'s rules (which header, the walk, entry syntax, trusted values),
//! in a file of their own to keep `mod.rs` readable.

use super::*;
use axum::http::HeaderValue;

const PROXY: &str = "127.0.0.1:5000";

fn trusted(ranges: &[&str]) -> TrustedProxies {
    let ranges: Vec<IpNet> = ranges.iter().map(|r| parse_trusted(r).unwrap()).collect();
    TrustedProxies::new(&ranges)
}

/// A chain's proxies: nginx on loopback, a CDN in 10.0.0.0/8 and fd00::/8.
fn chain() -> TrustedProxies {
    trusted(&["127.0.0.1", "10.0.0.0/8", "fd00::/8"])
}

fn lines(name: &str, values: &[&str]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for value in values {
        headers.append(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    headers
}

/// The address a request from [`PROXY`] with `name: values` (raw bytes, which need not be
/// text) counts under.
fn raw(t: &TrustedProxies, name: &'static str, values: &[&[u8]]) -> String {
    let mut headers = HeaderMap::new();
    for value in values {
        headers.append(name, HeaderValue::from_bytes(value).unwrap());
    }
    t.client(PROXY.parse().unwrap(), &headers).ip().to_string()
}

/// The address a request from `peer` with `name: values` counts under.
fn client(t: &TrustedProxies, peer: &str, name: &str, values: &[&str]) -> String {
    let peer: SocketAddr = peer.parse().unwrap();
    t.client(peer, &lines(name, values)).ip().to_string()
}

fn xff(t: &TrustedProxies, values: &[&str]) -> String {
    client(t, PROXY, FORWARDED_FOR, values)
}

/// Through proxies configured with `--forwarded-header forwarded`.
fn fwd(t: &TrustedProxies, values: &[&str]) -> String {
    let t = t.clone().reading(ForwardedHeader::Forwarded);
    client(&t, PROXY, FORWARDED, values)
}

#[test]
fn trusted_proxies_are_addresses_or_ranges_and_bad_values_are_refused() {
    let ok = |v: &str| parse_trusted(v).unwrap().to_string();
    assert_eq!(ok("127.0.0.1"), "127.0.0.1/32");
    assert_eq!(ok(" 10.0.0.0/8 "), "10.0.0.0/8");
    assert_eq!(ok("fd00::/8"), "fd00::/8");
    assert_eq!(ok("2001:db8::5"), "2001:db8::5/128");
    // IPv4-mapped is kept as the IPv4 it is.
    assert_eq!(ok("::ffff:192.0.2.9"), "192.0.2.9/32");
    assert_eq!(ok("::ffff:10.0.0.0/104"), "10.0.0.0/8");
    let refused = |v: &str| parse_trusted(v).unwrap_err();
    assert!(refused("10.0.0.1/8").contains("write the range 10.0.0.0/8 or the address 10.0.0.1"));
    // Private ranges from /8: a network's own proxies.
    for private in [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "fd00::/8",
    ] {
        assert_eq!(ok(private), private);
    }
    assert!(refused("fc00::/7").contains("a range wider than /8"));
    // Public IPv4 from /13 (a CDN's widest edge range), not a cloud's whole /8.
    assert_eq!(ok("104.16.0.0/13"), "104.16.0.0/13");
    for wide in [
        "0.0.0.0/0",
        "3.0.0.0/8",
        "104.16.0.0/12",
        "::ffff:0.0.0.0/96",
    ] {
        assert!(refused(wide).contains("a range wider than /13"), "{wide}");
    }
    // Public IPv6 from /28 (AWS CloudFront's 2600:9000::/28): a /8 there is a registry's share.
    assert_eq!(ok("2606:4700::/32"), "2606:4700::/32");
    assert_eq!(ok("2600:9000::/28"), "2600:9000::/28");
    assert_eq!(ok("2001:db8:1::/48"), "2001:db8:1::/48");
    for wide in ["::/0", "2a00::/8", "2000::/3", "2600:9000::/27"] {
        assert!(refused(wide).contains("a range wider than /28"), "{wide}");
    }
    // Prefixes where any IPv4 host can appear: refused, overlapping either way.
    for (range, what) in [
        ("::/28", "IPv4-mapped"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b::10.0.0.0/104", "NAT64"),
        ("64:ff9b::/32", "NAT64"),
        ("2001::/32", "Teredo"),
        ("2001:0:4136:e378::/64", "Teredo"),
        ("2002:c000:200::/40", "6to4"),
    ] {
        assert!(
            refused(range).contains(&format!("overlaps the {what} prefix")),
            "{range}"
        );
    }
    // Checked once mapped ranges are IPv4: ::ffff:0.0.0.0/96 is 0.0.0.0/0.
    assert!(refused("::ffff:0.0.0.0/96").contains("is 0.0.0.0/0"));
    assert!(refused("::ffff:0.0.0.0/103").contains("is 0.0.0.0/7, a range wider than /13"));
    assert_eq!(ok("::ffff:10.0.0.0/104"), "10.0.0.0/8");
    for bad in [
        "nginx",
        "10.0.0.0/33",
        "",
        "127.0.0.1:80",
        "10.0.0.0/",
        "fd00::/129",
    ] {
        assert!(
            refused(bad).contains("is not an IP address or a CIDR range"),
            "{bad}"
        );
    }
}

#[test]
fn a_peer_is_trusted_by_range_and_as_mapped_ipv4() {
    let t = chain();
    for yes in ["127.0.0.1", "10.200.3.4", "::ffff:10.1.2.3", "fd12::1"] {
        assert!(t.contains(yes.parse().unwrap()), "{yes}");
    }
    for no in [
        "127.0.0.2",
        "11.0.0.1",
        "fe80::1",
        "::ffff:127.0.0.2",
        "2001:db8::1",
    ] {
        assert!(!t.contains(no.parse().unwrap()), "{no}");
    }
    assert!(!TrustedProxies::default().any());
    // A mapped range given matches plain IPv4 peers.
    assert!(trusted(&["::ffff:10.0.0.0/104"]).contains("10.9.9.9".parse().unwrap()));
    // A NAT64 peer is never a local proxy (RFC 6052 carries no private IPv4 there), even if
    // the IPv4 it carries is trusted.
    assert!(!t.contains("64:ff9b::10.1.2.3".parse().unwrap()));
    assert!(!trusted(&["127.0.0.1"]).names_exactly("64:ff9b::7f00:1".parse().unwrap()));
}

#[test]
fn an_untrusted_peers_headers_are_ignored() {
    let t = trusted(&["127.0.0.1/32"]);
    for peer in ["127.0.0.2:5000", "192.0.2.1:5000", "[2001:db8::1]:5000"] {
        let own = peer.parse::<SocketAddr>().unwrap().ip().to_string();
        assert_eq!(client(&t, peer, FORWARDED_FOR, &["198.51.100.7"]), own);
        assert_eq!(client(&t, peer, FORWARDED, &["for=198.51.100.7"]), own);
    }
    // Nothing trusted: nobody's headers.
    let none = TrustedProxies::default();
    assert_eq!(xff(&none, &["198.51.100.7"]), "127.0.0.1");
}

#[test]
fn one_proxy_its_own_entry_counts_and_the_clients_entries_are_never_read() {
    let t = trusted(&["127.0.0.1"]);
    assert_eq!(xff(&t, &["10.9.9.9, 198.51.100.7"]), "198.51.100.7");
    assert_eq!(xff(&t, &["198.51.100.7"]), "198.51.100.7");
    // No header, or no entry: the proxy's own address.
    assert_eq!(xff(&t, &[]), "127.0.0.1");
    assert_eq!(xff(&t, &[""]), "127.0.0.1");
    // A client claiming to be the proxy itself, to the left: never reached.
    assert_eq!(xff(&t, &["127.0.0.1, 198.51.100.7"]), "198.51.100.7");
}

#[test]
fn a_chain_is_walked_from_the_right_to_the_first_untrusted_entry() {
    let t = chain();
    // Client-written 203.0.113.9, the CDN's entry for the client, nginx's entry for the CDN.
    assert_eq!(
        xff(&t, &["203.0.113.9, 198.51.100.7, 10.0.0.5"]),
        "198.51.100.7"
    );
    assert_eq!(
        fwd(
            &t,
            &["for=203.0.113.9, for=198.51.100.7, for=\"[fd00::5]:443\""]
        ),
        "198.51.100.7"
    );
    // Every entry trusted: the leftmost.
    assert_eq!(xff(&t, &["10.0.0.7, 10.0.0.5"]), "10.0.0.7");
    assert_eq!(fwd(&t, &["for=10.0.0.7, for=10.0.0.5"]), "10.0.0.7");
    // Several lines are one list, in order.
    assert_eq!(
        xff(&t, &["203.0.113.9, 198.51.100.7", "10.0.0.5"]),
        "198.51.100.7"
    );
    assert_eq!(xff(&t, &["198.51.100.8", "198.51.100.7"]), "198.51.100.7");
    assert_eq!(
        fwd(
            &t,
            &[
                "for=203.0.113.9",
                "for=198.51.100.7;proto=https, for=10.0.0.5"
            ]
        ),
        "198.51.100.7"
    );
    // Empty elements are skipped.
    assert_eq!(xff(&t, &["198.51.100.7, , 10.0.0.5,"]), "198.51.100.7");
}

#[test]
fn an_entry_that_is_no_address_stops_the_walk_at_the_last_trusted_hop() {
    let t = chain();
    // The client's address further left is never used.
    assert_eq!(xff(&t, &["198.51.100.66, garbage, 10.0.0.5"]), "10.0.0.5");
    assert_eq!(xff(&t, &["198.51.100.66, unknown"]), "127.0.0.1");
    assert_eq!(xff(&t, &["198.51.100.66, 10.0.0.5 10.0.0.6"]), "127.0.0.1");
    assert_eq!(xff(&t, &["198.51.100.66", "garbage"]), "127.0.0.1");
    for opaque in [
        "for=unknown",
        "for=_hidden",
        "for=\"_hidden.2\"",
        "proto=https;by=10.0.0.5",
        "for=2001:db8::1",
        "for=[2001:db8::1",
        "for=192.0.2.1:99999",
        "garbage",
        "for=192.0.2.1;",
    ] {
        assert_eq!(
            fwd(&t, &[&format!("for=198.51.100.66, {opaque}, for=10.0.0.5")]),
            "10.0.0.5",
            "{opaque}"
        );
    }
    // An element that is not text stops it too (the rightmost line's, read first).
    assert_eq!(
        raw(&t, FORWARDED_FOR, &[b"198.51.100.66", b"198.51.100.7\xff"]),
        "127.0.0.1"
    );
    // Bytes that are not text to the left of a proxy's entry (`$proxy_add_x_forwarded_for`
    // appends to the client's line) are never read: the proxy's entry counts.
    assert_eq!(
        raw(&t, FORWARDED_FOR, &[b"\xff, 198.51.100.7"]),
        "198.51.100.7"
    );
    // The same in `Forwarded` mode: the client's bytes left of nginx's element.
    let fwd_t = t.clone().reading(ForwardedHeader::Forwarded);
    assert_eq!(
        raw(&fwd_t, FORWARDED, &[b"for=\xff\"\\, for=198.51.100.7"]),
        "198.51.100.7"
    );
    // A zone id is the writer's interface, no client's, in either header.
    assert_eq!(xff(&t, &["198.51.100.66, [fe80::1%3]:80"]), "127.0.0.1");
    assert_eq!(xff(&t, &["198.51.100.66, fe80::1%eth0"]), "127.0.0.1");
}

#[test]
fn entries_may_carry_ports_and_ipv6_in_either_header() {
    let t = trusted(&["127.0.0.1"]);
    for (entry, ip) in [
        ("192.0.2.1:5678", "192.0.2.1"),
        ("[2001:db8::1]:80", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("2001:db8::1", "2001:db8::1"),
        ("::ffff:198.51.100.7", "198.51.100.7"),
    ] {
        assert_eq!(xff(&t, &[entry]), ip, "{entry}");
    }
    for (element, ip) in [
        ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
        ("For=192.0.2.60", "192.0.2.60"),
        ("for=\"192.0.2.60:8080\"", "192.0.2.60"),
        ("for=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17"),
        ("for=\"[2001:db8:cafe::17]\"", "2001:db8:cafe::17"),
        ("proto=https;for=192.0.2.60", "192.0.2.60"),
    ] {
        assert_eq!(fwd(&t, &[element]), ip, "{element}");
    }
    // Mapped peers are the IPv4 proxy; mapped trusted entries are skipped.
    let chain = chain();
    assert_eq!(
        client(
            &chain,
            "[::ffff:127.0.0.1]:5000",
            FORWARDED_FOR,
            &["198.51.100.7, ::ffff:10.0.0.5"]
        ),
        "198.51.100.7"
    );
}

#[test]
fn only_the_configured_header_is_read_and_the_other_is_ignored_entirely() {
    let xff_proxy = trusted(&["127.0.0.1"]);
    let fwd_proxy = xff_proxy.clone().reading(ForwardedHeader::Forwarded);
    let peer: SocketAddr = PROXY.parse().unwrap();
    // nginx sets X-Forwarded-For and passes the client's own Forwarded through: by default
    // (X-Forwarded-For) the client's Forwarded is never read.
    let mut both = lines(FORWARDED, &["for=203.0.113.66"]);
    both.append(FORWARDED_FOR, HeaderValue::from_static("198.51.100.7"));
    let ip = |t: &TrustedProxies, h: &HeaderMap| t.client(peer, h).ip().to_string();
    assert_eq!(ip(&xff_proxy, &both), "198.51.100.7");
    assert_eq!(ip(&fwd_proxy, &both), "203.0.113.66");
    // A proxy that sets only Forwarded: a client's X-Forwarded-For is never read.
    let only_xff = lines(FORWARDED_FOR, &["203.0.113.66"]);
    assert_eq!(ip(&fwd_proxy, &only_xff), "127.0.0.1");
    let only_fwd = lines(FORWARDED, &["for=203.0.113.66"]);
    assert_eq!(ip(&xff_proxy, &only_fwd), "127.0.0.1");
    // An unreadable configured header is not replaced by the other.
    let mut opaque = lines(FORWARDED, &["for=unknown"]);
    opaque.append(FORWARDED_FOR, HeaderValue::from_static("203.0.113.9"));
    assert_eq!(ip(&fwd_proxy, &opaque), "127.0.0.1");
    // The port stays the peer's.
    assert_eq!(xff_proxy.client(peer, &both).port(), 5000);
}

#[test]
fn a_quoted_value_cannot_smuggle_a_for_into_a_proxys_element() {
    let t = chain();
    // The proxy's element for 198.51.100.7, whose quoted host a client chose.
    assert_eq!(
        fwd(&t, &[r#"for=198.51.100.7;host="a;for=203.0.113.66""#]),
        "198.51.100.7"
    );
    assert_eq!(
        fwd(
            &t,
            &[r#"for=198.51.100.7;host="a,for=203.0.113.66", for=10.0.0.5"#]
        ),
        "198.51.100.7"
    );
    // Unreadable elements stop the walk at the last trusted hop.
    for bad in [
        "for=203.0.113.66;for=10.0.0.6",
        r#"for="203.0.113.66"x"#,
        r#"for=203.0.113.66;host="a"b"#,
    ] {
        assert_eq!(
            fwd(&t, &[&format!("for=198.51.100.1, {bad}, for=10.0.0.5")]),
            "10.0.0.5",
            "{bad}"
        );
    }
    // A client's open quote cannot swallow the elements proxies appended after it: those are
    // read (here the CDN's, trusted), and the walk stops at the client's unreadable element.
    assert_eq!(
        fwd(
            &t,
            &[r#"for=198.51.100.1, for="203.0.113.66, for=10.0.0.5"#]
        ),
        "10.0.0.5"
    );
    // The line nginx makes of a client's `for=x;a="` and its own `for=$remote_addr`.
    assert_eq!(
        fwd(&t, &[r#"for=203.0.113.66;a=", for=198.51.100.7"#]),
        "198.51.100.7"
    );
}

#[test]
fn addresses_no_client_has_are_unreadable_in_either_header() {
    let t = chain();
    for (x, f) in [
        ("0.0.0.0", "for=0.0.0.0"),
        ("::", r#"for="[::]""#),
        ("224.0.0.1", "for=224.0.0.1"),
        ("ff02::1", r#"for="[ff02::1]""#),
        ("::198.51.100.7", r#"for="[::198.51.100.7]""#),
        ("::ffff:0.0.0.0", r#"for="[::ffff:0.0.0.0]""#),
    ] {
        assert_eq!(
            xff(&t, &[&format!("198.51.100.1, {x}, 10.0.0.5")]),
            "10.0.0.5"
        );
        assert_eq!(
            fwd(&t, &[&format!("for=198.51.100.1, {f}, for=10.0.0.5")]),
            "10.0.0.5"
        );
    }
    // IPv6 loopback is an address, not an IPv4-compatible one.
    assert_eq!(xff(&trusted(&["127.0.0.1"]), &["::1"]), "::1");
}

#[test]
fn the_walk_reads_at_most_max_hops_elements() {
    let t = chain();
    let hops = |client: &str, trusted_after: usize| {
        let mut list = vec![client.to_owned()];
        list.extend((0..trusted_after).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1)));
        list.join(", ")
    };
    // The client behind 31 trusted hops is the 32nd element: read.
    assert_eq!(xff(&t, &[&hops("198.51.100.7", 31)]), "198.51.100.7");
    // Behind 32 it is not: the last trusted hop read counts, never a client-written entry.
    assert_eq!(xff(&t, &[&hops("198.51.100.7", 32)]), "10.0.0.1");
    assert_eq!(xff(&t, &[&hops("198.51.100.7", 99)]), "10.0.0.68");
    // A header of 100 lines of 100 entries each (the 32 KiB header cap of `crate::serve`
    // aside): the rightmost untrusted, at once.
    let wide: Vec<String> = (0..100)
        .map(|l| {
            (0..100)
                .map(|i| format!("198.51.{l}.{}", i + 1))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let wide: Vec<&str> = wide.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    assert_eq!(xff(&t, &wide), "198.51.99.100");
    let forwarded: Vec<String> = (0..10_000).map(|_| "for=10.0.0.5".to_owned()).collect();
    assert_eq!(fwd(&t, &[&forwarded.join(",")]), "10.0.0.5");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}
