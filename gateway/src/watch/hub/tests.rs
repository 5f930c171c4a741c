//! The hub's unit tests: the pool's limits, the light-address reserve and the streams kept for
//! established devices (their per-bucket caps, and the kept registrations' caps of issue 26's
//! review: one bucket, or a few with streams of many aggregates each, cannot drain them), and
//! what a trim and a deletion leave of the versions a stream was sent.

use super::*;

fn aggregates(from: u128, n: u128) -> HashSet<AggregateRef> {
    (from..from + n)
        .map(|i| AggregateRef {
            type_id: Uuid::from_u128(1),
            id: Uuid::from_u128(i),
        })
        .collect()
}

fn hub(per_ip: usize) -> Arc<Hub> {
    Hub::new(
        WatchLimits {
            max_aggregates: 100,
            max_streams_per_client: 1000,
            max_streams_per_ip: per_ip,
            max_streams: 1000,
            max_registrations: 400,
        },
        Uuid::nil(),
    )
}

#[test]
fn heavy_addresses_leave_the_last_quarter_of_registrations_to_light_ones() {
    let hub = hub(64);
    let heavy = IpAddr::from([192, 0, 2, 1]);
    let mut held = Vec::new();
    let mut refused = 0;
    for n in 0..10u128 {
        match hub.register(
            Some(Uuid::from_u128(n)),
            false,
            heavy,
            aggregates(n * 100, 50),
        ) {
            Ok(r) => held.push(r),
            Err(_) => refused += 1,
        }
    }
    // 6 streams × 50 = 300: a seventh would leave less than 100 of 400.
    assert_eq!((held.len(), refused), (6, 4));
    // A device on its own address watches, twice even (its second stream too).
    let light = IpAddr::from([192, 0, 2, 2]);
    let a = hub.register(
        Some(Uuid::from_u128(100)),
        false,
        light,
        aggregates(5000, 50),
    );
    let b = hub.register(
        Some(Uuid::from_u128(101)),
        false,
        light,
        aggregates(6000, 40),
    );
    assert!(a.is_ok() && b.is_ok());
    // Its third is over the reserve's share.
    assert!(
        hub.register(
            Some(Uuid::from_u128(102)),
            false,
            light,
            aggregates(7000, 1)
        )
        .is_err()
    );
}

#[test]
fn without_a_per_address_cap_there_is_no_reserve() {
    let hub = hub(0);
    let proxy = IpAddr::from([192, 0, 2, 9]);
    let held: Vec<Registration> = (0..8u128)
        .map(|n| {
            hub.register(
                Some(Uuid::from_u128(n)),
                false,
                proxy,
                aggregates(n * 100, 50),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(held.len(), 8);
}

#[test]
fn established_devices_have_kept_streams_one_bucket_cannot_take_alone() {
    // 32 streams: 2 kept, 1 per bucket.
    let hub = Hub::new(
        WatchLimits {
            max_aggregates: 100,
            max_streams_per_client: 4,
            max_streams_per_ip: 4,
            max_streams: 32,
            max_registrations: 10_000,
        },
        Uuid::nil(),
    );
    assert_eq!((hub.kept_streams, hub.kept_per_bucket), (2, 1));
    // Fresh keys from light addresses, one stream each, fill the pool, reserve included.
    let fresh: Vec<Registration> = (0..32u8)
        .map(|n| {
            let ip = IpAddr::from([198, 51, 100, n]);
            hub.register(
                Some(Uuid::from_u128(1000 + u128::from(n))),
                false,
                ip,
                aggregates(0, 1),
            )
            .unwrap()
        })
        .collect();
    let home = IpAddr::from([192, 0, 2, 1]);
    let fresh_key = hub.register(Some(Uuid::from_u128(1)), false, home, aggregates(0, 1));
    assert!(fresh_key.is_err(), "a fresh key finds the pool full");
    // An established device watches, from a flooding address too.
    let a = hub
        .register(Some(Uuid::from_u128(2)), true, home, aggregates(0, 1))
        .unwrap();
    assert!(a.kept());
    // Its second stream is not kept (one each); nor a second one of its bucket.
    assert!(
        hub.register(Some(Uuid::from_u128(2)), true, home, aggregates(0, 1))
            .is_err()
    );
    assert!(
        hub.register(Some(Uuid::from_u128(3)), true, home, aggregates(0, 1))
            .is_err()
    );
    // Another bucket's established device takes the last kept stream.
    let other = IpAddr::from([192, 0, 2, 2]);
    let b = hub
        .register(Some(Uuid::from_u128(4)), true, other, aggregates(0, 1))
        .unwrap();
    assert!(b.kept());
    drop((a, b, fresh));
    let registry = hub.lock();
    assert_eq!(
        (
            registry.streams.len(),
            registry.kept,
            registry.kept_registrations
        ),
        (0, 0, 0)
    );
    assert!(registry.kept_by_ip.is_empty());
}

/// The defaults: 10,000 streams, 200,000 registrations, 1,000 aggregates a stream, 64 streams
/// an address; the pool, registrations included, filled by fresh keys (each address up to its
/// share, then the light ones), so every further stream needs a kept place.
fn full_at_the_defaults() -> (Arc<Hub>, Vec<Registration>) {
    let hub = Hub::new(
        WatchLimits {
            max_aggregates: 1_000,
            max_streams_per_client: 4,
            max_streams_per_ip: 64,
            max_streams: 10_000,
            max_registrations: 200_000,
        },
        Uuid::nil(),
    );
    assert_eq!(
        (
            hub.kept_streams,
            hub.kept_registrations,
            hub.kept_aggregates,
            hub.kept_per_bucket,
            hub.kept_registrations_per_bucket
        ),
        (625, 12_500, 20, 78, 1_562)
    );
    let mut held = Vec::new();
    let mut n = 0u128;
    for a in 0..250u8 {
        let ip = IpAddr::from([198, 51, 100, a]);
        for _ in 0..64 {
            let fresh = Some(Uuid::from_u128(1_000_000 + n));
            match hub.register(fresh, false, ip, aggregates(n * 1_000, 1_000)) {
                Ok(r) => held.push(r),
                Err(_) => break,
            }
            n += 1;
        }
    }
    let registry = hub.lock();
    assert_eq!((registry.kept, registry.registrations), (0, 200_000));
    drop(registry);
    (hub, held)
}

#[test]
fn one_bucket_cannot_drain_the_kept_registrations() {
    // Issue 26's review: established ids of one address, each stream naming 1,000 aggregates,
    // took all 12,500 kept registrations in 13 streams (an eighth of the kept *streams* was
    // their only bucket cap), and every other established device's watch was refused.
    let (hub, _fresh) = full_at_the_defaults();
    let attacker = IpAddr::from([203, 0, 113, 7]);
    let mut kept = Vec::new();
    for k in 0..20u128 {
        let n = if k == 12 { 500 } else { 1_000 };
        let id = Some(Uuid::from_u128(5_000 + k));
        if let Ok(r) = hub.register(id, true, attacker, aggregates(900_000_000 + k * 1_000, n)) {
            kept.push(r);
        }
    }
    let device = |k: u128| {
        let ip = IpAddr::from([192, 0, 2, 1]);
        let id = Some(Uuid::from_u128(k));
        hub.register(id, true, ip, aggregates(999_000_000_000, 1))
    };
    assert!(
        device(1).is_ok_and(|r| r.kept()),
        "another bucket's device watches"
    );
    assert_eq!(kept.len(), 0, "a kept stream names 20 aggregates at most");
    // With 20 each, the bucket stops at its per-address cap (64 streams, 1,280 registrations).
    for k in 20..120u128 {
        let id = Some(Uuid::from_u128(5_000 + k));
        if let Ok(r) = hub.register(id, true, attacker, aggregates(900_000_000 + k * 1_000, 20)) {
            kept.push(r);
        }
    }
    assert_eq!(kept.len(), 64);
    assert_eq!(hub.lock().kept_registrations, 1_280);
    assert!(device(2).is_ok_and(|r| r.kept()), "and still does");
    drop(kept);
    let registry = hub.lock();
    assert_eq!((registry.kept, registry.kept_registrations), (0, 0));
    assert!(registry.kept_by_ip.is_empty());
}

#[test]
fn a_few_buckets_of_long_streams_cannot_drain_the_kept_registrations() {
    // Within every bucket cap, 13 buckets with one kept stream each would take the 12,500 kept
    // registrations if a kept stream could name 1,000: the 14th bucket's device is refused
    // with 612 kept streams still free. A kept stream names its part, 20, at most.
    let (hub, _fresh) = full_at_the_defaults();
    let mut kept = Vec::new();
    for b in 0..13u8 {
        let n = if b == 12 { 500 } else { 1_000 };
        let id = Some(Uuid::from_u128(7_000 + u128::from(b)));
        let ip = IpAddr::from([203, 0, 113, b]);
        let at = 800_000_000 + u128::from(b) * 1_000;
        if let Ok(r) = hub.register(id, true, ip, aggregates(at, n)) {
            kept.push(r);
        }
    }
    // A 14th bucket's device watches its part: 20 aggregates fit, 21 do not.
    let home = IpAddr::from([192, 0, 2, 1]);
    let device = Some(Uuid::from_u128(1));
    let r = hub.register(device, true, home, aggregates(999_000_000_000, 20));
    assert!(
        r.is_ok_and(|r| r.kept()),
        "the 14th bucket's device watches"
    );
    assert_eq!(kept.len(), 0, "{} long streams kept", kept.len());
    assert!(
        hub.register(device, true, home, aggregates(999_000_000_000, 21))
            .is_err()
    );
}

#[test]
fn without_a_per_address_cap_kept_streams_have_no_bucket_cap() {
    // Behind a proxy not named with `--trusted-proxy` every stream has the proxy's address:
    // deploy.md has `--watch-max-streams-per-ip 0` there, and every established device must
    // find the whole kept reserve, not the proxy bucket's eighth of it.
    let limits = |per_ip| WatchLimits {
        max_aggregates: 100,
        max_streams_per_client: 4,
        max_streams_per_ip: per_ip,
        max_streams: 256,
        max_registrations: 10_000,
    };
    let proxy = IpAddr::from([10, 0, 0, 1]);
    for (per_ip, want) in [(0, 16), (1_000, 2)] {
        let hub = Hub::new(limits(per_ip), Uuid::nil());
        let fresh: Vec<Registration> = (0..256u128)
            .map_while(|n| {
                hub.register(
                    Some(Uuid::from_u128(1_000 + n)),
                    false,
                    proxy,
                    aggregates(n, 1),
                )
                .ok()
            })
            .collect();
        let kept: Vec<Registration> = (0..40u128)
            .filter_map(|n| {
                hub.register(Some(Uuid::from_u128(n)), true, proxy, aggregates(n, 10))
                    .ok()
            })
            .collect();
        // The pool is full to the fresh keys (its light-address reserve, with a cap, closed
        // to the proxy's bucket), then the kept streams.
        assert_eq!(fresh.len(), if per_ip == 0 { 256 } else { 192 });
        assert!(kept.iter().all(Registration::kept));
        assert_eq!(kept.len(), want, "--watch-max-streams-per-ip {per_ip}");
    }
}

/// A trim reaches the streams as a trim and keeps what they were sent: after it and a resync
/// (the renewal of an upstream watch, now on a node still catching up), a lower version is not
/// sent. A deletion is sent as one, and the recreated aggregate's versions are sent again.
#[test]
fn a_trim_keeps_the_versions_sent_a_deletion_forgets_them() {
    use super::super::slot::Note;
    use crate::backend::AggregateKey;
    let hub = hub(0);
    let ip: IpAddr = [127, 0, 0, 1].into();
    let r = hub.register(None, false, ip, aggregates(1, 1)).unwrap();
    let a = *r.slot.aggregates.iter().next().unwrap();
    let key = AggregateKey {
        org: Uuid::nil(),
        aggregate: a,
    };
    hub.dispatch(Change::Changed { key, version: 10 });
    assert_eq!(r.slot.drain(), vec![Note::Changed(a, 10)]);
    hub.dispatch(Change::Reset {
        key,
        deleted: false,
    });
    hub.dispatch(Change::Resync);
    assert_eq!(r.slot.drain(), vec![Note::Resync]);
    hub.dispatch(Change::Changed { key, version: 9 });
    assert_eq!(r.slot.drain(), vec![]);
    hub.dispatch(Change::Reset {
        key,
        deleted: false,
    });
    assert_eq!(r.slot.drain(), vec![Note::Reset(a, false)]);
    hub.dispatch(Change::Reset { key, deleted: true });
    hub.dispatch(Change::Changed { key, version: 1 });
    assert_eq!(
        r.slot.drain(),
        vec![Note::Reset(a, true), Note::Changed(a, 1)]
    );
}
