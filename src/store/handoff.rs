//! How the embedded store's writer thread waits for the next write: briefly awake, then asleep.
//!
//! A write reaches the writer's thread through a channel. A thread that blocks at once on an
//! empty channel is parked, and so, with nothing else to run, is its CPU; on a virtual machine
//! waking a parked CPU for the next write costs more than the commit's own work. At a low
//! write rate the next write usually comes within a fraction of a millisecond (the reply
//! wakes its caller, who writes again; a created Run's first status follows its create), so
//! the writer stays awake that long before it blocks — as long as the writes keep coming that
//! close together: after a longer gap it sleeps at once, so that writes which come seldom, or
//! in bursts far apart, cost no CPU beyond their own.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Waits for the next item of a channel, awake while items have been coming close together.
#[derive(Debug)]
pub(super) struct Handoff {
    /// How long to stay awake for the next item.
    awake: Duration,
    /// Whether the last item came soon enough (within twice `awake`) to stay awake for the next.
    close: bool,
}

impl Handoff {
    /// A wait that stays awake for up to `awake`.
    pub(super) fn new(awake: Duration) -> Self {
        Self { awake, close: true }
    }

    /// The next item of `rx`: checked for, giving the CPU to anything else runnable in between,
    /// for up to the awake time if the last item came close after the one before, then waited
    /// for asleep. `None` once every sender is gone.
    pub(super) fn next<T>(&mut self, rx: &Receiver<T>) -> Option<T> {
        let start = Instant::now();
        let until = start
            + if self.close {
                self.awake
            } else {
                Duration::ZERO
            };
        let item = loop {
            match rx.try_recv() {
                Ok(item) => break Some(item),
                Err(TryRecvError::Disconnected) => break None,
                Err(TryRecvError::Empty) if Instant::now() >= until => break rx.recv().ok(),
                // Yielding rather than spinning: under load the CPU goes to whoever is
                // runnable, and the check comes back when they are done.
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        };
        // Twice the awake time: an item that came while asleep also paid for the wake-up.
        self.close = start.elapsed() <= 2 * self.awake;
        item
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
        assert_eq!(Handoff::new(Duration::from_secs(60)).next(&rx), Some(7));
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
        assert_eq!(Handoff::new(Duration::ZERO).next(&rx), Some("late"));
        drop(sender.join());
    }

    #[test]
    fn a_long_gap_puts_the_next_wait_to_sleep_and_a_close_item_wakes_it_again() {
        // Margins far beyond any pause of a busy test machine's scheduler: close is within
        // 100 ms here, and the gap is 500 ms.
        let mut wait = Handoff::new(Duration::from_millis(50));
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            tx.send(1).unwrap();
            tx
        });
        assert_eq!(wait.next(&rx), Some(1));
        assert!(!wait.close, "500 ms after the wait began is not close");
        let tx = sender.join().unwrap();
        tx.send(2).unwrap();
        assert_eq!(wait.next(&rx), Some(2));
        assert!(wait.close, "an item already waiting is close");
    }

    #[test]
    fn items_already_queued_come_in_order() {
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        let got: Vec<_> = (0..3)
            .map(|_| Handoff::new(Duration::ZERO).next(&rx).unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn the_end_of_the_senders_ends_the_wait_awake_or_asleep() {
        let (tx, rx) = mpsc::channel::<u8>();
        drop(tx);
        assert_eq!(Handoff::new(Duration::from_secs(60)).next(&rx), None);
        let (tx, rx) = mpsc::channel::<u8>();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(tx);
        });
        assert_eq!(Handoff::new(Duration::ZERO).next(&rx), None);
        sender.join().unwrap();
    }
}
