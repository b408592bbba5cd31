//! The bytes of a connection once its route is open, both ways until both ends are done.
//!
//! On Linux the kernel moves them: each way, `splice(2)` from the socket into a pipe and
//! from the pipe into the other socket, so the proxy neither copies them nor holds a
//! buffer for them (a pipe is made the first time bytes arrive that way). Elsewhere they
//! are copied through a buffer each way.

use std::io;

use tokio::net::TcpStream;

/// The most bytes one read of a relay takes, each way: the size asked of each pipe (the
/// kernel's `pipe-max-size`, 1 MiB by default, caps it), and of the copy's buffers where
/// there is no `splice`.
const RELAY_BUFFER: usize = 1024 * 1024;

/// Relays between `client` and `upstream` until both directions have ended (each end's
/// end of input is passed on as a shutdown of the other's output).
pub(super) async fn relay(client: &mut TcpStream, upstream: &mut TcpStream) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        tokio::try_join!(spliced(client, upstream), spliced(upstream, client)).map(drop)
    }
    #[cfg(not(target_os = "linux"))]
    {
        tokio::io::copy_bidirectional_with_sizes(client, upstream, RELAY_BUFFER, RELAY_BUFFER)
            .await
            .map(drop)
    }
}

/// One way: what `from` sends, to `to`, through a pipe; then `to`'s output shut down.
#[cfg(target_os = "linux")]
async fn spliced(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    use rustix::pipe::{PipeFlags, SpliceFlags};
    use tokio::io::Interest;

    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut pipe = None;
    loop {
        from.readable().await?;
        let (read_end, write_end) = match &pipe {
            Some(p) => p,
            None => {
                let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
                // A smaller pipe (the default 64 KiB) only means more rounds.
                let _ = rustix::pipe::fcntl_setpipe_size(&w, RELAY_BUFFER);
                pipe.insert((r, w))
            }
        };
        let moved = from.try_io(Interest::READABLE, || {
            rustix::pipe::splice(from, None, write_end, None, RELAY_BUFFER, flags)
                .map_err(io::Error::from)
        });
        let mut left = match moved {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        while left > 0 {
            to.writable().await?;
            let sent = to.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(read_end, None, to, None, left, flags).map_err(io::Error::from)
            });
            match sent {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => left -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
    match rustix::net::shutdown(to, rustix::net::Shutdown::Write) {
        // The other side already closed: nothing left to tell it.
        Err(rustix::io::Errno::NOTCONN) => Ok(()),
        other => other.map_err(io::Error::from),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener};

    use super::relay;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Every byte reaches the other end, in order, both ways, and each end's end of
    /// input reaches the other: the client sends 8 MiB and shuts its side; the server
    /// reads to its end, answers 5 MiB and closes; the relay then ends.
    #[test]
    fn every_byte_and_each_end_is_passed_on_both_ways() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let back = TcpListener::bind("127.0.0.1:0").unwrap();
        let (front_addr, back_addr) = (front.local_addr().unwrap(), back.local_addr().unwrap());
        let up = pattern(8 << 20, 1);
        let down = pattern(5 << 20, 7);
        let server = {
            let (up, down) = (up.clone(), down.clone());
            std::thread::spawn(move || {
                let (mut s, _) = back.accept().unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).unwrap();
                assert!(
                    got == up,
                    "the server got {} bytes, not what was sent",
                    got.len()
                );
                s.write_all(&down).unwrap();
            })
        };
        let client = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(front_addr).unwrap();
            c.write_all(&up).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            got
        });
        rt.block_on(async {
            let (accepted, _) = front.accept().unwrap();
            accepted.set_nonblocking(true).unwrap();
            let mut client_side = tokio::net::TcpStream::from_std(accepted).unwrap();
            let mut upstream = tokio::net::TcpStream::connect(back_addr).await.unwrap();
            relay(&mut client_side, &mut upstream).await.unwrap();
        });
        server.join().unwrap();
        let got = client.join().unwrap();
        assert!(
            got == down,
            "the client got {} bytes, not what was answered",
            got.len()
        );
    }
}
