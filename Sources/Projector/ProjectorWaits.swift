import Threads

/// The projector's waits between transactions: gathering records while caught up, held back by its
/// projection's fold limit, and yielding to a projector that drains a backlog.
extension Projector {
    /// After a transaction that caught up: sleeps until `deadline` (monotonic) unless `foldNow`,
    /// a waiter on `checkpointBells` or a stop ends it first (`Options.coalesceWindowMicros`).
    /// New records do not wake it: the window is what lets them gather.
    func gather(until deadline: Int64, _ stop: StopSignal) {
        guard monotonicMicros() < deadline else { return }
        stop.addDoorbell(windowBell)
        defer { stop.removeDoorbell(windowBell) }
        guard !stop.isRequested else { return }
        state.withLock { $0.gathering = true }
        defer { state.withLock { $0.gathering = false } }
        windowBell.wait(untilMonotonicMicros: deadline)
    }

    /// Waits while the projection's fold limit (`LogProjection.checkpointAndFoldLimit`) holds it back: until the projector it yields to
    /// (the one whose tables it reads, in this process) commits again, or `limitPollMicros` at most
    /// (one of another process), or a stop.
    func waitForLimit(_ stop: StopSignal) {
        let bell = Doorbell()
        stop.addDoorbell(bell)
        defer { stop.removeDoorbell(bell) }
        let deadline = monotonicMicros() + options.limitPollMicros
        guard let first = options.yieldsTo else {
            _ = bell.wait(untilMonotonicMicros: deadline)
            return
        }
        // Not as a waiting read: following its commits must not end its window.
        first.checkpointBells.add(bell, announce: false)
        defer { first.checkpointBells.remove(bell) }
        // It may have committed between this projector's read of its limit and the bell.
        guard first.status.checkpoint <= status.checkpoint else { return }
        _ = bell.wait(untilMonotonicMicros: deadline)
    }

    /// Waits while `first` drains a backlog, woken by each of its transactions and by a stop.
    func yield(to first: Projector, _ stop: StopSignal) {
        // Caught up (the usual case): nothing to wait for, and no bell added, which would end
        // `first`'s window of `Options.coalesceWindowMicros` as a waiting read does.
        guard first.status.draining else { return }
        let bell = Doorbell()
        first.checkpointBells.add(bell)
        stop.addDoorbell(bell)
        defer {
            first.checkpointBells.remove(bell)
            stop.removeDoorbell(bell)
        }
        defer { state.withLock { $0.yielding = false } }
        let deadline = monotonicMicros() + options.yieldMicrosMax
        while !stop.isRequested && monotonicMicros() < deadline {
            let status = first.status
            guard status.draining && !status.stopped else { return }
            state.withLock { $0.yielding = true }
            _ = bell.wait(untilMonotonicMicros: deadline)
        }
    }
}
