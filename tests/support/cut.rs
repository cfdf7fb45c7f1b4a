//! A TCP proxy that cuts a connection at a chosen instant of the server's answer: as soon as
//! the bytes it has relayed from the server contain a marker, it closes both sides. Tests of
//! the response window use it to drop a client exactly after a progress frame, or exactly
//! after the frame that carries the answer, over real sockets and without any hook in the
//! server.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A proxy for one connection to `target`.
pub struct Cut {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Resolves with everything relayed from the server once the connection was cut (or
    /// the server closed it first).
    pub done: oneshot::Receiver<String>,
}

impl Cut {
    /// Relay one connection to `target` and cut it once the server's bytes contain `marker`.
    pub async fn at(target: SocketAddr, marker: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, done) = oneshot::channel();
        let marker = marker.as_bytes().to_vec();
        tokio::spawn(async move {
            let (mut client, _) = listener.accept().await.unwrap();
            let mut server = TcpStream::connect(target).await.unwrap();
            let mut seen = Vec::new();
            {
                let (mut client_read, mut client_write) = client.split();
                let (mut server_read, mut server_write) = server.split();
                let up = async {
                    let mut buf = vec![0u8; 8192];
                    loop {
                        let n = client_read.read(&mut buf).await.unwrap_or(0);
                        if n == 0 || server_write.write_all(&buf[..n]).await.is_err() {
                            // The client is done sending; keep relaying the answer.
                            std::future::pending::<()>().await;
                        }
                    }
                };
                let down = async {
                    let mut buf = vec![0u8; 8192];
                    loop {
                        let n = server_read.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let _ = client_write.write_all(&buf[..n]).await;
                        if seen.windows(marker.len()).any(|w| w == marker.as_slice()) {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = up => {}
                    () = down => {}
                }
            }
            // Both sockets close here, at once.
            drop(client);
            drop(server);
            let _ = tx.send(String::from_utf8_lossy(&seen).into_owned());
        });
        Self { addr, done }
    }
}
