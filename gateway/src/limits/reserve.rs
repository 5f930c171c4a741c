//! The last quarter of a byte budget, kept for light addresses: write bodies and read pages.
//!
//! Each address bucket may hold an eighth of a byte budget (`super::share_bytes`), so eight
//! addresses holding their shares hold all of it. For write bodies that was eight addresses
//! each uploading a large body fast and then stalling; for read pages, eight addresses asking
//! for pages and reading them slowly or not at all, asking again as soon as each is cut (at
//! about the idle timeout, `crate::serve::unsent`): either way every other client was refused
//! 429 (42900) — issue 26. So a reservation that would leave less than a quarter of the budget
//! free ([`reserve_of`]) is allowed only while the address bucket then holds at most `light`
//! bytes: one write body of the client's default `maxBatchBytes` (1 MiB,
//! `crate::routes::write::LIGHT_BYTES`), one read page (`--read-page-bytes`,
//! `crate::routes::read`). A device sends one body or reads one page at a time, so it always
//! finds room while the heavy addresses hold three quarters of the budget at most; filling the
//! reserve too takes a quarter of the budget ÷ `light` further addresses (16 for write bodies, 8
//! for read pages at the defaults), on top of the ⌈¾ ÷ ⅛⌉ = 6 that fill the rest.
//!
//! Why a quarter, not an eighth or a sixteenth: it is the reserve of every light-address rule
//! here (write slots, change streams and their registrations), and a smaller one buys fewer
//! addresses — at the read defaults 6 + 8 = 14 fill the budget, with an eighth 7 + 4 = 11, with
//! a sixteenth 8 + 2 = 10 — while with a quarter an address that is merely busy (a household
//! behind one NAT reading several pages at once) still shares three quarters with the others.
//! The sixteenths elsewhere are a different thing: places kept *beyond* a pool for established
//! client ids, which reads do not have (a read does not make a device established). Keyed on
//! the address bucket, not on the client id: a client id is a key anyone can make, an address
//! is not. Without a per-address share (`--write-buffer-bytes-per-ip 0` /
//! `--read-buffer-bytes-per-ip 0`, behind a proxy not named with `--trusted-proxy`) there is no
//! reserve: every request would be the proxy's.

use celeriant_sync_protocol::codes::gateway as g;

use super::budget::Budget;
use crate::error::ApiError;

/// The part of a budget of `total` bytes kept for light addresses: a quarter.
pub fn reserve_of(total: usize) -> usize {
    total / 4
}

/// Whether an address bucket holding `held` bytes of a budget of `total` (with `available`
/// free) may take `more`: yes while at least the reserve stays free, and past that only while
/// it then holds at most `light`.
pub fn allows(total: usize, available: usize, held: usize, more: usize, light: usize) -> bool {
    available.saturating_sub(more) >= reserve_of(total) || held.saturating_add(more) <= light
}

/// [`allows`] for `budget` now, or 429 (42900, `retry`) counted as
/// `budget_refusals_total{kind=<budget>,reason="reserve"}`. `held`: what the address bucket
/// holds of the budget (`None`: no per-address share, so no reserve); `holds` says what a heavy
/// address holds, for the message ("several bodies").
pub fn check(
    budget: &Budget,
    held: Option<usize>,
    more: usize,
    light: usize,
    holds: &str,
) -> Result<(), ApiError> {
    let Some(held) = held else {
        return Ok(());
    };
    if allows(budget.total(), budget.available(), held, more, light) {
        return Ok(());
    }
    crate::observe::budget_refused(budget.name(), "reserve");
    Err(ApiError::code(
        g::GATEWAY_BUSY,
        format!(
            "the gateway holds most of the bytes of {} it may, and this address holds {holds}; \
             retry shortly",
            budget.name()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn above_the_reserve_anyone_takes_below_it_only_the_light() {
        // 64 MiB, reserve 16 MiB, light 2 MiB (the read defaults).
        let (total, light) = (64 * MIB, 2 * MIB);
        assert_eq!(reserve_of(total), 16 * MIB);
        // 48 MiB taken: a heavy address may take up to the reserve's edge, not past it.
        assert!(allows(total, 18 * MIB, 6 * MIB, 2 * MIB, light));
        assert!(!allows(total, 17 * MIB, 6 * MIB, 2 * MIB, light));
        // Past it, an address holding nothing takes one page, not two; one holding a little
        // takes what keeps it at one page.
        assert!(allows(total, 17 * MIB, 0, 2 * MIB, light));
        assert!(!allows(total, 17 * MIB, 0, 2 * MIB + 1, light));
        assert!(allows(total, 3 * MIB, MIB / 2, 3 * MIB / 2, light));
        assert!(!allows(total, 3 * MIB, MIB / 2, 3 * MIB / 2 + 1, light));
        // What is counted after the fact (more 0): an address over `light` below the reserve.
        assert!(allows(total, 15 * MIB, 2 * MIB, 0, light));
        assert!(!allows(total, 15 * MIB, 2 * MIB + 1, 0, light));
        assert!(allows(total, 16 * MIB, 8 * MIB, 0, light));
        // A reservation larger than what is free still passes here (the budget refuses it).
        assert!(allows(total, 0, 0, light, light));
    }

    /// The most pages `addresses` can hold at once of a budget of `total` pages, each address
    /// at most `share` pages and a page being `light`, over every order of taking and giving
    /// back pages (a model check: the states are how many addresses hold 0, 1, … `share`
    /// pages, explored from all at 0 by "one address takes a page, if the rule allows it" and
    /// "one address gives one back").
    fn most_held(addresses: usize, total: usize, share: usize) -> usize {
        let start = {
            let mut s = vec![0usize; share + 1];
            s[0] = addresses;
            s
        };
        let held = |s: &[usize]| s.iter().enumerate().map(|(h, n)| h * n).sum::<usize>();
        let mut seen = std::collections::HashSet::from([start.clone()]);
        let mut todo = vec![start];
        let mut most = 0;
        while let Some(s) = todo.pop() {
            let now = held(&s);
            most = most.max(now);
            for h in 0..=share {
                if s[h] == 0 {
                    continue;
                }
                let mut next = Vec::new();
                if h < share && now < total && allows(total, total - now, h, 1, 1) {
                    next.push(h + 1);
                }
                if h > 0 {
                    next.push(h - 1);
                }
                for to in next {
                    let mut n = s.clone();
                    n[h] -= 1;
                    n[to] += 1;
                    if seen.insert(n.clone()) {
                        todo.push(n);
                    }
                }
            }
        }
        most
    }

    #[test]
    fn the_addresses_it_takes_to_fill_the_read_budget() {
        // In pages of the defaults: a 64 MiB budget is 32 pages of 2 MiB, an eighth 4 pages,
        // the reserve 8 pages, and a light address holds one page.
        let (total, share) = (32, 4);
        // Without the reserve 8 addresses hold it all (8 × 4); with it, however they take and
        // give back pages, 8 hold 26 pages at most, 10 hold 28 and 13 hold 31: a device's
        // page still fits. 14 (6 heavy + 8 light) fill it.
        assert_eq!(most_held(8, total, share), 26);
        assert_eq!(most_held(10, total, share), 28);
        assert_eq!(most_held(13, total, share), 31);
        assert_eq!(most_held(14, total, share), 32);
        // Three addresses hold their shares whether or not the reserve is reached.
        assert_eq!(most_held(3, total, share), 12);
    }

    #[test]
    fn check_refuses_past_the_reserve_and_not_without_a_share() {
        let budget = Budget::new("read responses", 64);
        let _heavy = budget.reserve(48).unwrap();
        let e = check(&budget, Some(10), 4, 8, "pages").unwrap_err();
        assert_eq!(e.0.code(), Some(g::GATEWAY_BUSY));
        assert!(check(&budget, Some(4), 4, 8, "pages").is_ok());
        assert!(
            check(&budget, None, 4, 8, "pages").is_ok(),
            "no share: no reserve"
        );
        let _light = budget.reserve(4).unwrap();
        assert!(check(&budget, Some(0), 8, 8, "pages").is_ok());
    }
}
