//! Futures an actor owns and polls in its own turns: each is polled when
//! started and again whenever its waker fires, which tells the actor a
//! [`Poll`] message. The actor never suspends for them (it keeps routing
//! while an answer or a store call is on its way), nothing runs on another
//! thread, and on a simulated network the wake-ups happen inside the
//! simulation's steps, so a seed replays them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll as TaskPoll, Wake, Waker};
use troubadour::{ActorRef, Handles, Message};

/// A future an actor started; its output is handed back to the actor.
pub(crate) type Task<E> = Pin<Box<dyn Future<Output = E> + Send>>;

/// Tells the owning actor that task `0` can make progress.
pub(crate) struct Poll(pub u64);

impl Message for Poll {
    type Reply = ();
}

/// The tasks of one actor.
pub(crate) struct Tasks<E> {
    next: u64,
    running: HashMap<u64, Task<E>>,
}

impl<E> Default for Tasks<E> {
    fn default() -> Self {
        Tasks {
            next: 0,
            running: HashMap::new(),
        }
    }
}

impl<E> Tasks<E> {
    /// Starts `task` for the actor `owner`: polls it once now; its output,
    /// if it is ready at once, is returned.
    pub fn start<A, K>(&mut self, owner: &ActorRef<A>, task: Task<E>) -> Option<E>
    where
        A: Handles<Poll, K>,
        K: 'static,
    {
        let key = self.next;
        self.next += 1;
        self.running.insert(key, task);
        self.poll(owner, key)
    }

    /// Polls task `key` (after its wake-up); its output if it finished.
    pub fn poll<A, K>(&mut self, owner: &ActorRef<A>, key: u64) -> Option<E>
    where
        A: Handles<Poll, K>,
        K: 'static,
    {
        let task = self.running.get_mut(&key)?;
        let wake = Arc::new(TaskWaker {
            owner: Mutex::new(Some(Box::new(WakeOwner::<A, K> {
                owner: owner.clone(),
                _k: std::marker::PhantomData,
            }))),
            key,
        });
        let waker = Waker::from(wake);
        match task.as_mut().poll(&mut TaskContext::from_waker(&waker)) {
            TaskPoll::Ready(out) => {
                self.running.remove(&key);
                Some(out)
            }
            TaskPoll::Pending => None,
        }
    }
}

trait Notify: Send {
    fn notify(&self, key: u64);
}

struct WakeOwner<A: troubadour::Actor, K> {
    owner: ActorRef<A>,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<A, K> Notify for WakeOwner<A, K>
where
    A: Handles<Poll, K>,
    K: 'static,
{
    fn notify(&self, key: u64) {
        // A stopped owner has dropped its tasks: nothing to wake.
        let _ = self.owner.tell(Poll(key));
    }
}

/// Wakes the owner once: later wake-ups of the same poll are the same
/// news, and the next poll makes a new waker.
struct TaskWaker {
    owner: Mutex<Option<Box<dyn Notify>>>,
    key: u64,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(owner) = owner {
            owner.notify(self.key);
        }
    }
}
