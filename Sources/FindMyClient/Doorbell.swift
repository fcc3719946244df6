// A wake-up for a loop that waits for work or a time: `ring` from anywhere, `wait` in the loop.
import Synchronization

final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
        var generation = 0
    }
    private let state = Mutex(State())

    /// Wakes the waiter, or the next wait at once.
    func ring() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            if state.waiter == nil { state.rung = true }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns when rung (or rung since the last wait), at `deadline` (ClientClock's microseconds;
    /// nil: no deadline), or when the task is cancelled. One waiter at a time.
    func wait(untilMicros deadline: Int64?) async {
        let generation = state.withLock { state -> Int? in
            if state.rung {
                state.rung = false
                return nil
            }
            state.generation += 1
            return state.generation
        }
        guard let generation, !Task.isCancelled else { return }
        let timer: Task<Void, Never>? = deadline.map { deadline in
            Task { [weak self] in
                let micros = deadline - ClientClock.nowMicros()
                if micros > 0 { try? await Task.sleep(for: .microseconds(micros + 1000)) }
                self?.wake(generation)
            }
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state -> Bool in
                    if state.rung || state.generation != generation {
                        state.rung = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            self.wake(generation)
        }
        timer?.cancel()
    }

    /// Ends the wait of `generation` if it is still the current one.
    private func wake(_ generation: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.generation == generation else { return nil }
            state.generation += 1
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }
}
