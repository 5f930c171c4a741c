//! The start-up check behind "one configured address is one node": an address that resolves to
//! several IP addresses (round-robin DNS, a name over several nodes) may reach another node on
//! the tips' connections than the one the upstream watch is open on, a replica that may lag.
//! Tips are then off for the process (a warning says so); `ready` goes without them, which is
//! always safe. Several loopback addresses (`localhost` as `127.0.0.1` and `::1`) count as one
//! host. A load balancer behind one IP address cannot be seen from here: the docs say not to
//! name one (protocol.md section 13).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

/// Longest the whole check may take at start-up.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `ips` (one address's resolution) name one host.
pub fn one_host(ips: &[IpAddr]) -> bool {
    if ips.iter().all(IpAddr::is_loopback) {
        return !ips.is_empty();
    }
    ips.iter().collect::<BTreeSet<_>>().len() == 1
}

/// `Err(why)` when an address of `addresses` resolves to more than one host, or cannot be
/// resolved within [`LOOKUP_TIMEOUT`] (then nothing says it names one node).
pub async fn one_node_each(addresses: &[String]) -> Result<(), String> {
    let check = async {
        for address in addresses {
            let ips: Vec<IpAddr> = tokio::net::lookup_host(address.as_str())
                .await
                .map_err(|e| format!("{address} cannot be resolved: {e}"))?
                .map(|a| a.ip())
                .collect();
            if !one_host(&ips) {
                return Err(format!(
                    "{address} resolves to {} addresses ({ips:?}), not one node",
                    ips.len()
                ));
            }
        }
        Ok(())
    };
    tokio::time::timeout(LOOKUP_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| Err("the Celeriant addresses were not resolved in time".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ip_or_loopbacks_are_one_host_several_are_not() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(one_host(&[ip("10.0.0.1")]));
        assert!(one_host(&[ip("10.0.0.1"), ip("10.0.0.1")]));
        assert!(one_host(&[ip("127.0.0.1"), ip("::1")]));
        assert!(!one_host(&[ip("10.0.0.1"), ip("10.0.0.2")]));
        assert!(!one_host(&[ip("127.0.0.1"), ip("10.0.0.2")]));
        assert!(!one_host(&[]));
    }

    #[tokio::test]
    async fn a_literal_address_is_one_node() {
        assert!(one_node_each(&["127.0.0.1:7000".into()]).await.is_ok());
        assert!(
            one_node_each(&["no-such-host.invalid:1".into()])
                .await
                .is_err()
        );
    }
}
