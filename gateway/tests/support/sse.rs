//! A change stream read off a raw socket: the request, the answer's head, then one
//! Server-Sent Event at a time (or the connection's end), each within a deadline.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One event: its name and its data parsed as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: String,
    pub data: Value,
}

/// What came next on the stream.
#[derive(Debug)]
pub enum Next {
    Event(Sse),
    /// The gateway closed the connection (or it broke).
    Closed,
    /// Nothing within the wait.
    Quiet,
}

/// An open change stream.
pub struct Stream {
    reader: BufReader<TcpStream>,
    pub status: u16,
    pub head: String,
    /// The body when the answer was not a stream.
    pub body: String,
}

/// Opens `GET path` (query form) or `POST path` with `body`, with a bearer `token`.
pub fn open(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Stream {
    open_on(
        TcpStream::connect(addr).unwrap(),
        addr,
        method,
        path,
        token,
        body,
    )
}

/// As [`open`], on a connection the caller made (from another loopback address, say).
pub fn open_on(
    mut socket: TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Stream {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token
        .map(|t| {
            let proof = super::device::proof_for(t, method, path, body.as_bytes())
                .map(|p| format!("dpop: {p}\r\n"))
                .unwrap_or_default();
            format!("authorization: Bearer {t}\r\n{proof}")
        })
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}content-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(socket);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut stream = Stream {
        reader,
        status,
        head,
        body: String::new(),
    };
    if status != 200 {
        let length = stream
            .header("content-length")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(0);
        let mut buf = vec![0; length];
        std::io::Read::read_exact(&mut stream.reader, &mut buf).unwrap();
        stream.body = String::from_utf8_lossy(&buf).into_owned();
    }
    stream
}

impl Stream {
    /// A header of the answer's head.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// The refusal's body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Reads one chunked-encoding line of payload as text lines until a blank event line.
    fn line(&mut self, deadline: Instant) -> Result<Option<String>, ()> {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.reader.get_ref().set_read_timeout(Some(wait)).unwrap();
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned())),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(())
            }
            Err(_) => Ok(None),
        }
    }

    /// The next event within `wait`. The body is chunked: chunk-size lines are skipped (an
    /// SSE line never is a bare hex number), and the `0` chunk ends the stream.
    pub fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let line = match self.line(deadline) {
                Err(()) => return Next::Quiet,
                Ok(None) => return Next::Closed,
                Ok(Some(line)) => line,
            };
            if let Some(v) = line.strip_prefix("event: ") {
                event = v.to_owned();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = v.to_owned();
            } else if line.is_empty() {
                if !event.is_empty() {
                    return Next::Event(Sse {
                        event,
                        data: serde_json::from_str(&data).unwrap(),
                    });
                }
            } else if line == "0" && event.is_empty() {
                return Next::Closed;
            }
        }
    }

    /// The next event that is not a heartbeat, within `wait`; panics otherwise.
    pub fn expect(&mut self, wait: Duration) -> Sse {
        let deadline = Instant::now() + wait;
        loop {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Next::Event(e) if e.event == "heartbeat" => continue,
                Next::Event(e) => return e,
                other => panic!("expected an event, got {other:?}"),
            }
        }
    }
}
