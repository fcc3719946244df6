// A fixed position, for a desktop or a server that does not move and has no GPS receiver.
import FindMyClient
import Threads

/// A `FixSource` that says the same place every `intervalSeconds` (the first at once), with the
/// machine's clock, source "fixed"; a fresh fix (for a locate) is taken at the call.
final class FixedFixSource: FixSource, @unchecked Sendable {
    let latitude: Double
    let longitude: Double
    let accuracyMeters: Double
    let intervalSeconds: Double
    // Under `lock`: the thread saying the position while started.
    private let lock = ConditionLock()
    private var worker: StoppableThread?

    init(latitude: Double, longitude: Double, accuracyMeters: Double, intervalSeconds: Double) {
        precondition(intervalSeconds > 0, "a fixed position needs an interval")
        self.latitude = latitude
        self.longitude = longitude
        self.accuracyMeters = accuracyMeters
        self.intervalSeconds = intervalSeconds
    }

    func start(onFix: @escaping @Sendable (ClientFix) -> Void) throws {
        let thread = StoppableThread()
        lock.withLock {
            precondition(worker == nil, "a FixedFixSource starts once until stopped")
            worker = thread
        }
        let intervalMicros = Int64(intervalSeconds * 1_000_000)
        thread.start { [self] stop in
            while !stop.isRequested {
                onFix(fixNow())
                stop.wait(micros: intervalMicros)
            }
        }
    }

    func stop() {
        let thread = lock.withLock {
            defer { worker = nil }
            return worker
        }
        thread?.stop()
    }

    func freshFix(timeoutSeconds: Double) async -> ClientFix? { fixNow() }

    private func fixNow() -> ClientFix {
        ClientFix(
            latitude: latitude, longitude: longitude, accuracyMeters: accuracyMeters, source: "fixed",
            recordedAtMicros: ClientClock.nowMicros())
    }
}
