//! The floor of any hop in front of a stdio server: a relay that moves bytes and nothing
//! else. What a call costs through it, against the server alone, is what one more process
//! in the way costs on this machine (its reads, writes and wake-ups, and the server's
//! calls arriving in other batches), before a gateway does any work of its own.
//!
//! One thread, one `poll` over the client's input and the server's output, each read
//! written on whole as it came: no parsing, no buffering beyond one read, no task runtime.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

use rustix::event::{PollFd, PollFlags, poll};

/// Runs `command` and relays this process's stdin to its stdin and its stdout to this
/// process's stdout, until the server's output ends.
pub fn relay(command: &[String]) {
    let (program, args) = command.split_first().expect("--relay -- COMMAND...");
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the relay cannot start {program}: {e}"));
    let mut to_server = child.stdin.take();
    let mut from_server = child.stdout.take().expect("the server's stdout is piped");
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let (client_ready, server_ready) = {
            let mut fds = vec![PollFd::new(&from_server, PollFlags::IN)];
            if to_server.is_some() {
                fds.push(PollFd::new(&stdin, PollFlags::IN));
            }
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => panic!("the relay's poll failed: {e}"),
            }
            (
                fds.get(1).is_some_and(|fd| !fd.revents().is_empty()),
                !fds[0].revents().is_empty(),
            )
        };
        if client_ready && let Some(server) = to_server.as_mut() {
            match rustix::io::read(stdin.as_fd(), &mut buf) {
                Ok(n) if n > 0 => {
                    if server.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                // The client is done: the server sees its input end too.
                _ => to_server = None,
            }
        }
        if server_ready {
            match from_server.read(&mut buf) {
                Ok(n) if n > 0 => {
                    if write_all(&stdout, &buf[..n]).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
    }
    drop(to_server);
    let _ = child.wait();
}

/// Writes `bytes` whole to `out`'s descriptor, without std's line buffering.
fn write_all(out: &impl AsFd, mut bytes: &[u8]) -> rustix::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(out.as_fd(), bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The same floor in front of an HTTP server: listens on `port` and relays each
/// connection's bytes to a connection of its own to `upstream` (both on 127.0.0.1) and
/// back, until the bench stops it. One thread, one `epoll` over the listener and every
/// connection (as a server's runtime waits), each read written on whole as it came: no
/// HTTP parsed, no task runtime.
pub fn tcp_relay(port: u16, upstream: u16) {
    use rustix::buffer::spare_capacity;
    use rustix::event::epoll;
    use std::net::{TcpListener, TcpStream};
    const LISTENER: u64 = u64::MAX;
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the relay's port");
    let poller = epoll::create(epoll::CreateFlags::CLOEXEC).expect("an epoll");
    epoll::add(
        &poller,
        &listener,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN,
    )
    .expect("the listener watched");
    // Each pair, by slot: the client's connection and the relay's own to the server; an
    // event names its slot and side as `slot * 2 + side`. A closed pair's slot is not
    // taken again, so that an event of a wait never names a pair other than its own.
    let mut pairs: Vec<Option<[TcpStream; 2]>> = Vec::new();
    let mut events = Vec::with_capacity(64);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        events.clear();
        match epoll::wait(&poller, spare_capacity(&mut events), None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("the relay's epoll failed: {e}"),
        }
        for event in &events {
            let data = event.data.u64();
            if data == LISTENER {
                let (client, _) = listener.accept().expect("the relay accepts");
                let server = TcpStream::connect(("127.0.0.1", upstream))
                    .unwrap_or_else(|e| panic!("the relay cannot reach port {upstream}: {e}"));
                let slot = pairs.len();
                for (side, s) in [&client, &server].into_iter().enumerate() {
                    s.set_nodelay(true).expect("TCP_NODELAY");
                    let key = (slot * 2 + side) as u64;
                    epoll::add(
                        &poller,
                        s,
                        epoll::EventData::new_u64(key),
                        epoll::EventFlags::IN,
                    )
                    .expect("a connection watched");
                }
                pairs.push(Some([client, server]));
                continue;
            }
            let (slot, side) = ((data / 2) as usize, (data % 2) as usize);
            // Closed by an earlier event of this wait.
            let Some(pair) = &pairs[slot] else { continue };
            let (from, to) = (&pair[side], &pair[1 - side]);
            let open = match rustix::io::read(from.as_fd(), &mut buf) {
                Ok(n) if n > 0 => write_all(to, &buf[..n]).is_ok(),
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => true,
                // Either side closed: both connections go (closing them unwatches them).
                _ => false,
            };
            if !open {
                pairs[slot] = None;
            }
        }
    }
}
