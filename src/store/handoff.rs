//! How the embedded store's writer thread waits for the next write: briefly awake, then asleep.
//!
//! A write reaches the writer's thread through a channel. A thread that blocks at once on an
//! empty channel is parked, and so, with nothing else to run, is its CPU; on a virtual machine
//! waking a parked CPU for the next write costs more than the commit's own work. At a low
//! write rate the next write usually comes within a fraction of a millisecond (the reply
//! wakes its caller, who writes again; a created Run's first status follows its create), so
//! the writer stays awake that long before it blocks.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// The next item of `rx`: checked for, giving the CPU to anything else runnable in between,
/// for up to `awake`, then waited for asleep. `None` once every sender is gone.
pub(super) fn next<T>(rx: &Receiver<T>, awake: Duration) -> Option<T> {
    let until = Instant::now() + awake;
    loop {
        match rx.try_recv() {
            Ok(item) => return Some(item),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if Instant::now() >= until => return rx.recv().ok(),
            // Yielding rather than spinning: under load the CPU goes to whoever is runnable,
            // and the check comes back when they are done.
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn an_item_sent_while_awake_is_taken() {
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            tx.send(7).unwrap();
            tx
        });
        assert_eq!(next(&rx, Duration::from_secs(60)), Some(7));
        drop(sender.join());
    }

    #[test]
    fn an_item_sent_after_the_awake_time_is_waited_for() {
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            // Sent once the receiver has long stopped checking: it must still get it.
            std::thread::sleep(Duration::from_millis(50));
            tx.send("late").unwrap();
            tx
        });
        assert_eq!(next(&rx, Duration::ZERO), Some("late"));
        drop(sender.join());
    }

    #[test]
    fn items_already_queued_come_in_order() {
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        let got: Vec<_> = (0..3).map(|_| next(&rx, Duration::ZERO).unwrap()).collect();
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn the_end_of_the_senders_ends_the_wait_awake_or_asleep() {
        let (tx, rx) = mpsc::channel::<u8>();
        drop(tx);
        assert_eq!(next(&rx, Duration::from_secs(60)), None);
        let (tx, rx) = mpsc::channel::<u8>();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(tx);
        });
        assert_eq!(next(&rx, Duration::ZERO), None);
        sender.join().unwrap();
    }
}
