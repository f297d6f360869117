//! Cancellable sockets: a TCP connector and resolver whose blocking work a set `AbortFlag`
//! interrupts, through the per-call `CallSlot` the transports hand their socket to.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

/// The sockets of one attempt, shut down by the attempt's abort hook.
#[derive(Default)]
pub(super) struct CallSlot {
    pub(super) aborted: AtomicBool,
    socket: Mutex<Option<Weak<TcpStream>>>,
}

impl CallSlot {
    pub(super) fn abort(&self) {
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        self.aborted.store(true, Ordering::SeqCst);
        if let Some(stream) = socket.take().and_then(|w| w.upgrade()) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Makes `stream` the socket a cancel shuts down. Under the same lock as `abort`, so a
    /// cancel racing with this either sees the socket or is seen here.
    fn adopt(&self, stream: &Arc<TcpStream>) -> io::Result<()> {
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        if self.aborted.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "request aborted",
            ));
        }
        *socket = Some(Arc::downgrade(stream));
        Ok(())
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<CallSlot>>> = const { RefCell::new(None) };
}

/// Makes a slot current on this thread for the guard's lifetime.
pub(super) struct CurrentSlot(Option<Arc<CallSlot>>);

impl CurrentSlot {
    pub(super) fn enter(slot: Arc<CallSlot>) -> CurrentSlot {
        CurrentSlot(CURRENT.with(|c| c.replace(Some(slot))))
    }
}

impl Drop for CurrentSlot {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

fn current_slot() -> Option<Arc<CallSlot>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Waits for a helper thread's answer, giving up as soon as the current call is aborted. The
/// helper finishes on its own (bounded by the connect or DNS timeout) and its result is dropped.
fn wait_abortable<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ureq::Error> {
    let slot = current_slot();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("http-connect".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(ureq::Error::Io)?;
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Timeout) => {
                if slot
                    .as_ref()
                    .is_some_and(|s| s.aborted.load(Ordering::SeqCst))
                {
                    return Err(ureq::Error::Io(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "request aborted",
                    )));
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(ureq::Error::Io(io::Error::other("connect helper died")))
            }
        }
    }
}

/// DNS on a helper thread so a cancel does not wait for a slow resolver.
#[derive(Debug)]
pub(super) struct AbortableResolver;

impl Resolver for AbortableResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        // IP literals resolve without a lookup; no thread needed.
        let literal = uri
            .host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .is_some_and(|h| h.parse::<std::net::IpAddr>().is_ok());
        if literal {
            return DefaultResolver::default().resolve(uri, config, timeout);
        }
        let (uri, config) = (uri.clone(), config.clone());
        wait_abortable(move || DefaultResolver::default().resolve(&uri, &config, timeout))?
    }
}

/// Opens plain TCP sockets wrapped in `SocketTransport` (TLS is layered on top by the chain).
#[derive(Debug)]
pub(super) struct AbortableTcpConnector;

impl<In: Transport> Connector<In> for AbortableTcpConnector {
    type Out = Either<In, SocketTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails<'_>,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(chained) = chained {
            return Ok(Some(Either::A(chained)));
        }
        let addrs: Vec<SocketAddr> = details.addrs.iter().copied().collect();
        let budget = details.timeout.not_zero().map(|t| *t);
        let stream = wait_abortable(move || connect_any(&addrs, budget))??;
        let _ = stream.set_nodelay(true);
        let config = details.config;
        Ok(Some(Either::B(SocketTransport {
            stream: Arc::new(stream),
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
            read_timeout: None,
            write_timeout: None,
            adopted_by: Weak::new(),
        })))
    }
}

fn connect_any(addrs: &[SocketAddr], budget: Option<Duration>) -> Result<TcpStream, ureq::Error> {
    let mut last = io::Error::new(io::ErrorKind::ConnectionRefused, "no address to connect to");
    for addr in addrs {
        let result = match budget {
            Some(t) => TcpStream::connect_timeout(addr, t),
            None => TcpStream::connect(addr),
        };
        match result {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(ureq::Error::Timeout(ureq::Timeout::Connect))
            }
            Err(e) => last = e,
        }
    }
    Err(ureq::Error::Io(last))
}

/// A TCP transport that registers its socket with the current call before every I/O.
pub(super) struct SocketTransport {
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// The slot this socket was last handed to (compared by identity only).
    adopted_by: Weak<CallSlot>,
}

impl std::fmt::Debug for SocketTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketTransport")
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

impl SocketTransport {
    /// Hands the socket to the call now running on this thread (pooled sockets change calls).
    fn adopt(&mut self) -> Result<(), ureq::Error> {
        if let Some(slot) = current_slot() {
            if !Weak::ptr_eq(&self.adopted_by, &Arc::downgrade(&slot)) {
                slot.adopt(&self.stream)?;
                self.adopted_by = Arc::downgrade(&slot);
            }
        }
        Ok(())
    }
}

fn timeout_io(kind: io::ErrorKind, reason: ureq::Timeout, e: io::Error) -> ureq::Error {
    if kind == io::ErrorKind::TimedOut || kind == io::ErrorKind::WouldBlock {
        ureq::Error::Timeout(reason)
    } else {
        ureq::Error::Io(e)
    }
}

impl Transport for SocketTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.adopt()?;
        let timeout = timeout.for_write();
        if timeout.after.is_zero() {
            return Err(ureq::Error::Timeout(timeout.reason));
        }
        let want = timeout.not_zero().map(|t| *t);
        if want != self.write_timeout {
            self.stream.set_write_timeout(want)?;
            self.write_timeout = want;
        }
        let output = &self.buffers.output()[..amount];
        (&*self.stream)
            .write_all(output)
            .map_err(|e| timeout_io(e.kind(), timeout.reason, e))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.adopt()?;
        let timeout = timeout.for_read();
        if timeout.after.is_zero() {
            return Err(ureq::Error::Timeout(timeout.reason));
        }
        let want = timeout.not_zero().map(|t| *t);
        if want != self.read_timeout {
            self.stream.set_read_timeout(want)?;
            self.read_timeout = want;
        }
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&*self.stream).read(input) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(timeout_io(e.kind(), timeout.reason, e)),
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // A pooled socket is reusable only if the peer has sent nothing and not closed it.
        let stream = &*self.stream;
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let open =
            matches!(stream.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).is_ok() && open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn abort_before_adopt_shuts_the_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stream = Arc::new(TcpStream::connect(addr).expect("connect"));
        let (mut server, _) = listener.accept().expect("accept");
        let slot = CallSlot::default();
        slot.abort();
        assert!(slot.adopt(&stream).is_err());
        let mut buf = [0u8; 1];
        assert_eq!(server.read(&mut buf).expect("read"), 0, "peer sees EOF");
    }
}
