//! A loopback HTTP CONNECT proxy: it records each tunnel's target, answers `200`, and pipes
//! bytes both ways until either side closes. Enough for ureq, which tunnels http and https
//! alike through an `http://` proxy.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct ConnectProxy {
    port: u16,
    targets: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub fn start() -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let seen = targets.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let seen = seen.clone();
                thread::spawn(move || tunnel(conn, &seen));
            }
        });
        ConnectProxy { port, targets }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `host:port` of every CONNECT so far.
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

fn tunnel(client: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(client.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (parts.next(), parts.next()) else {
        let _ = (&client).write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n");
        return;
    };
    let target = target.to_owned();
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header == "\r\n" || header == "\n" => break,
            Ok(_) => {}
        }
    }
    seen.lock().unwrap().push(target.clone());
    let Ok(upstream) = TcpStream::connect(&target) else {
        let _ = (&client).write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
        return;
    };
    let _ = (&client).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    // Bytes the client sent after the CONNECT head sit in the reader's buffer.
    let buffered = reader.buffer().to_vec();
    let _ = (&upstream).write_all(&buffered);
    let (up2, client2) = (
        upstream.try_clone().expect("clone"),
        client.try_clone().expect("clone"),
    );
    thread::spawn(move || pipe(up2, client2));
    pipe(client, upstream);
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
