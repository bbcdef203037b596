//! A slow server made of a fast one: a TCP relay of the test's own on 127.0.0.1 that passes
//! every byte a client sends straight on to its target, and every byte the target answers back
//! only after a fixed delay, in order. Put in front of an etcd member, it is an etcd answering
//! each request that much later (a disk or a network that crawls rather than fails), which this
//! machine's kernel cannot make (it has no `netem`).
//!
//! Each connection is relayed by two tasks of its own; everything stops when the relay drops.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

/// Chunks on their way back, per connection, before the relay stops reading from the target.
const IN_FLIGHT: usize = 256;

/// A running relay; it stops, with every connection through it, when dropped.
pub struct Relay {
    addr: SocketAddr,
    _tasks: JoinSet<()>,
}

impl Relay {
    /// Starts a relay to `target` that holds each answer back for `delay`.
    pub async fn start(target: SocketAddr, delay: Duration) -> Result<Relay> {
        let listener = TcpListener::bind(crate::ports::free_addr()?).await?;
        let addr = listener.local_addr()?;
        let mut tasks = JoinSet::new();
        tasks.spawn(accept(listener, target, delay));
        Ok(Relay {
            addr,
            _tasks: tasks,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Accepts clients until dropped; each gets a connection to `target` of its own.
async fn accept(listener: TcpListener, target: SocketAddr, delay: Duration) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        connections.spawn(relay(client, target, delay));
    }
}

/// Relays one client: its requests at once, the answers after `delay`.
async fn relay(client: TcpStream, target: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (held, mut due) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let requests = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    let answers_in = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
            let chunk = buffer.get(..n).unwrap_or_default().to_vec();
            if held.send((Instant::now() + delay, chunk)).await.is_err() {
                break;
            }
        }
    };
    let answers_out = async {
        while let Some((at, chunk)) = due.recv().await {
            sleep_until(at).await;
            if client_write.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(requests, answers_in, answers_out);
}
