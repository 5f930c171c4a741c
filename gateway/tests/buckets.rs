//! The address bucket flags reach the limiters: a gateway started with
//! `--ipv6-bucket-prefix 64` keys two /64s of one /56 apart (the default, 56, keys them
//! together, with half of the bucket's rates per /64), and out-of-range prefixes are refused at
//! start. Its own test binary: the prefixes are one setting of the process.

mod support;

use celeriant_gateway::config::Config;
use celeriant_gateway::limits::ip::bucket;
use celeriant_gateway::limits::nested::{AddressLimiter, nested};
use clap::Parser;
use support::app::{Harness, Store};

#[tokio::test]
async fn the_flag_sets_the_buckets_of_every_limiter() {
    let a: std::net::IpAddr = "2001:db8:0:1::1".parse().unwrap();
    let b: std::net::IpAddr = "2001:db8:0:2::1".parse().unwrap();
    let _h = Harness::auth_on(Store::Embedded, |c| c.limits.ipv6_bucket_prefix = 64).await;
    assert_ne!(bucket(a), bucket(b));
    assert_eq!(
        bucket(a),
        "2001:db8:0:1::".parse::<std::net::IpAddr>().unwrap()
    );
    // At /64 the bucket is the /64: nothing is nested, a /64 has its bucket's whole budget.
    assert_eq!(nested(a), None);
    let limiter = AddressLimiter::new(0, 0, 4);
    let held: Vec<_> = (0..4).map(|_| limiter.enter(a).unwrap()).collect();
    assert!(limiter.enter(a).is_err());
    assert!(limiter.enter(b).is_ok(), "another /64 is another bucket");
    drop(held);
}

#[test]
fn out_of_range_prefixes_are_refused() {
    for (flag, value) in [
        ("--ipv4-bucket-prefix", "7"),
        ("--ipv4-bucket-prefix", "33"),
        ("--ipv6-bucket-prefix", "39"),
        ("--ipv6-bucket-prefix", "129"),
    ] {
        assert!(
            Config::try_parse_from(["celeriant-gateway", flag, value]).is_err(),
            "{flag} {value}"
        );
    }
    assert!(Config::try_parse_from(["celeriant-gateway", "--ipv6-bucket-prefix", "48"]).is_ok());
}
