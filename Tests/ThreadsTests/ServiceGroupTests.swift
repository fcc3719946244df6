import Synchronization
import Testing
import Threads

/// What the services of one test did, in order.
private final class Transcript: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

private struct StartRefused: Error, CustomStringConvertible {
    var description: String { "port in use" }
}

/// A service that writes what happens to it; one may refuse to start, and one runs a thread that
/// sleeps on its stop signal (so that its stop is a wake-up, not a poll).
private final class Recorder: Service {
    let name: String
    let transcript: Transcript
    let refusesToStart: Bool
    let stopSignal = StopSignal()
    private let stateBox = Mutex<ServiceState>(.idle)
    private let thread = Mutex<pthread_t?>(nil)

    init(_ name: String, _ transcript: Transcript, refusesToStart: Bool = false) {
        self.name = name
        self.transcript = transcript
        self.refusesToStart = refusesToStart
    }

    var state: ServiceState { stateBox.withLock { $0 } }

    func start() throws {
        if refusesToStart {
            transcript.add("\(name) refused")
            stateBox.withLock { $0 = .failed("port in use") }
            throw StartRefused()
        }
        let signal = stopSignal
        thread.withLock { $0 = spawnThread { signal.wait() } }
        stateBox.withLock { $0 = .running }
        transcript.add("\(name) started")
    }

    func stop(graceMicros: Int64) {
        stopSignal.request()
        if let running = thread.withLock({ $0 }) { pthread_join(running, nil) }
        stateBox.withLock { $0 = .stopped }
        transcript.add("\(name) stopped")
    }
}

#if canImport(Glibc)
    import Glibc
#endif

/// The server's service group as transcripts: services in, the order of starts and stops out.
@Suite struct ServiceGroupTests {
    @Test func startsInOrderAndStopsInReverseOnAStopRequest() throws {
        let transcript = Transcript()
        let services = ["log", "postgres", "projector", "api"].map { Recorder($0, transcript) }
        let group = ServiceGroup(services, graceMicros: 1_000_000)
        try group.start()
        #expect(services.allSatisfy { $0.state == .running })
        let signalThread = spawnThread { group.requestStop("SIGTERM") }
        #expect(group.waitForStop() == .requested("SIGTERM"))
        pthread_join(signalThread, nil)
        group.stop()
        #expect(
            transcript.all == [
                "log started", "postgres started", "projector started", "api started",
                "api stopped", "projector stopped", "postgres stopped", "log stopped",
            ])
        #expect(services.allSatisfy { $0.state == .stopped })
    }

    @Test func aServiceThatCannotStartStopsThoseStartedBeforeItInReverse() {
        let transcript = Transcript()
        let services = [
            Recorder("log", transcript), Recorder("postgres", transcript),
            Recorder("api", transcript, refusesToStart: true), Recorder("admin", transcript),
        ]
        let group = ServiceGroup(services, graceMicros: 0)
        do {
            try group.start()
            Issue.record("start succeeded although api refused")
        } catch {
            #expect(error.service == "api")
            #expect(error.description == "port in use")
        }
        #expect(
            transcript.all == [
                "log started", "postgres started", "api refused", "postgres stopped", "log stopped",
            ])
        #expect(services[3].state == .idle)
    }

    @Test func aFatalErrorFromOneServiceStopsAllInReverse() throws {
        let transcript = Transcript()
        let services = ["log", "postgres", "projector"].map { Recorder($0, transcript) }
        let group = ServiceGroup(services, graceMicros: 1_000_000)
        let reporter = spawnThread { group.fail("log", "fdatasync failed: EIO") }
        let why = try group.run()
        pthread_join(reporter, nil)
        #expect(why == .fatal(service: "log", message: "fdatasync failed: EIO"))
        #expect(
            transcript.all == [
                "log started", "postgres started", "projector started",
                "projector stopped", "postgres stopped", "log stopped",
            ])
    }

    @Test func stopRunsOnceWhateverThePathsThatCallIt() throws {
        let transcript = Transcript()
        let group = ServiceGroup([Recorder("a", transcript), Recorder("b", transcript)], graceMicros: 0)
        try group.start()
        group.fail("b", "first")
        group.requestStop("SIGINT")
        #expect(group.waitForStop() == .fatal(service: "b", message: "first"))
        group.stop()
        group.stop()
        #expect(transcript.all == ["a started", "b started", "b stopped", "a stopped"])
    }

    @Test func aStopSignalWakesItsWaiterAndATimedWaitEndsWithoutIt() {
        let signal = StopSignal()
        #expect(signal.wait(micros: 1_000) == false)
        let waiter = spawnThread { signal.wait() }
        signal.request()
        pthread_join(waiter, nil)
        #expect(signal.isRequested)
        #expect(signal.wait(micros: 60_000_000) == true)
    }
}
