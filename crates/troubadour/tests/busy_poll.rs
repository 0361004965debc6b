//! The I/O thread's poll before it sleeps (`ActorSystemBuilder::io_busy_poll`,
//! `remote::busy_poll`): whatever the thread is waiting for while it polls
//! must end the poll, or it would wait the whole configured time. Here that
//! time is an hour, so a poll that missed its end hangs the test (the
//! guards below fail it after a minute) instead of passing slowly.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use troubadour::{remote, ActorSystem};

const FOREVER: Duration = Duration::from_secs(3600);
const GUARD: Duration = Duration::from_secs(60);

/// A connected pair: the side the system polls and the far side.
fn sockets() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let far = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (near, _) = listener.accept().unwrap();
    near.set_nonblocking(true).unwrap();
    (near, far)
}

/// Lets the I/O thread run out of work and start polling (an ordering
/// aid, not a measurement: a test whose event came before the poll began
/// passes without testing anything, never fails wrongly).
fn let_it_park() {
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn data_on_a_polled_socket_is_read_while_the_thread_polls() {
    let system = ActorSystem::builder().io_busy_poll(FOREVER).build();
    let (near, mut far) = sockets();
    remote::busy_poll(&system, &near);
    let (got, read) = mpsc::channel();
    system.tokio_handle().spawn(async move {
        let mut near = tokio::net::TcpStream::from_std(near).unwrap();
        let mut byte = [0u8; 1];
        near.read_exact(&mut byte).await.unwrap();
        got.send(byte[0]).unwrap();
        near // kept open until the test ends
    });
    let_it_park();
    far.write_all(&[42]).unwrap();
    assert_eq!(
        read.recv_timeout(GUARD),
        Ok(42),
        "the byte was never read: the poll did not end when the socket became readable"
    );
    // Unread data keeps every later poll short, so the system stops at once.
    far.write_all(&[0]).unwrap();
}

#[test]
fn a_task_queued_from_another_thread_runs_while_the_thread_polls() {
    let system = ActorSystem::builder().io_busy_poll(FOREVER).build();
    let (near, mut far) = sockets();
    remote::busy_poll(&system, &near);
    // The thread slept before the socket was registered; a first task
    // wakes it, and its next park polls.
    system.tokio_handle().spawn(async {});
    let_it_park();
    let (ran, done) = mpsc::channel();
    system
        .tokio_handle()
        .spawn(async move { ran.send(()).unwrap() });
    assert_eq!(
        done.recv_timeout(GUARD),
        Ok(()),
        "the task never ran: the poll did not end when a task was queued"
    );
    far.write_all(&[0]).unwrap();
}
