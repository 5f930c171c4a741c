//! `celeriant-loadgen`: sustained load on a gateway's `/v1/write`, for `npm run bench`.
//!
//! Each of `--concurrency` tasks keeps one HTTP/1.1 keep-alive connection and writes its own
//! aggregate, `--events` fresh sequences per request, for `--seconds`. Prints one JSON object:
//! requests per second, latency percentiles, errors. (HTTP/1.1 is spoken by hand: the requests
//! are fixed-shape and a full client would only add its own overhead to the measurement.)

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Parser)]
#[command(
    name = "celeriant-loadgen",
    about = "Load generator for a celeriant-gateway's /v1/write"
)]
struct Args {
    /// The gateway, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: String,
    /// How long to load it.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent connections (one aggregate each).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Events per request.
    #[arg(long, default_value_t = 10)]
    events: u64,
}

fn body(client: &str, type_id: &str, id: &str, first: u64, events: u64) -> String {
    let events: Vec<_> = (first..first + events)
        .map(|seq| {
            json!({"clientSeq": seq, "eventId": null, "timestamp": 1_790_000_000_000u64, "type": 1, "minor": 0,
                   "data": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "iv": null})
        })
        .collect();
    json!({"clientId": client, "writes": [{"aggregate": {"typeId": type_id, "id": id}, "allowCreate": true, "events": events}]})
        .to_string()
}

async fn worker(
    addr: String,
    host: String,
    task: usize,
    events: u64,
    until: Instant,
) -> (Vec<Duration>, u64) {
    let (client, type_id) = (
        "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001",
        "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0002",
    );
    let id = format!("00000000-0000-4000-8000-{task:012}");
    let mut latencies = Vec::new();
    let mut errors = 0;
    let Ok(stream) = TcpStream::connect(&addr).await else {
        return (latencies, 1);
    };
    let _ = stream.set_nodelay(true);
    let mut stream = BufReader::new(stream);
    let mut next = 1;
    while Instant::now() < until {
        let payload = body(client, type_id, &id, next, events);
        next += events;
        let request = format!(
            "POST /v1/write HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
            payload.len()
        );
        let started = Instant::now();
        if stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .is_err()
        {
            return (latencies, errors + 1);
        }
        let (mut status, mut length) = (0u16, 0usize);
        let mut line = String::new();
        loop {
            line.clear();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return (latencies, errors + 1);
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(code) = l.strip_prefix("HTTP/1.1 ") {
                status = code.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
            } else if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut response = vec![0; length];
        if stream.read_exact(&mut response).await.is_err() {
            return (latencies, errors + 1);
        }
        latencies.push(started.elapsed());
        if status != 200 || !response.starts_with(br#"{"outcome":"landed","duplicate":false"#) {
            errors += 1;
        }
    }
    (latencies, errors)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let host = args
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|task| tokio::spawn(worker(host.clone(), host.clone(), task, args.events, until)))
        .collect();
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (l, e) = task.await.expect("worker panicked");
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{}",
        json!({"requests": latencies.len(), "requestsPerSecond": latencies.len() as f64 / elapsed,
               "p50Ms": pct(0.5), "p99Ms": pct(0.99), "errors": errors, "seconds": elapsed})
    );
}
