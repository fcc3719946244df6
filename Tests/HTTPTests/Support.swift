import Foundation
import HTTP
import HTTPClient
import Synchronization
@_exported import TestSupport
import Threads

/// A server with the routes the tests exercise, and counters the handlers keep.
final class TestServer: Sendable {
    let server: HTTPServer
    let echoCalls = Mutex(0)
    let handlersRunning = Mutex((now: 0, max: 0))
    /// Set when `/together` handlers waited out their deadline without meeting.
    let gaveUp = Mutex(false)
    let observations = Mutex<[HTTPServer.Observation]>([])
    /// Holds every `/blocked` handler until the test opens it.
    let blockedRelease = Latch()
    /// Replies of `/deferred/held` requests, kept until the test answers them.
    let heldReplies = Mutex<[HTTPReply]>([])

    /// What the server sent to its log sink, in order.
    let logLines = Mutex<[HTTPServer.LogLine]>([])

    /// The server's pool of large answers' arrays, and the storage each `/kept` answer was written in.
    let keptBuffers = KeptBuffers()
    let keptStorages = Mutex<[UInt]>([])

    init(
        listen: String = "127.0.0.1:0", limits: HTTPServer.Limits = HTTPServer.Limits(),
        nowMicros: (@Sendable () -> Int64)? = nil
    ) throws {
        let box = RoutesBox()
        server = try HTTPServer.start(
            listen: listen, router: box.router, limits: limits,
            observer: { [box] observation in box.owner?.observations.withLock { $0.append(observation) } },
            logSink: { [box] line in box.owner?.logLines.withLock { $0.append(line) } },
            nowMicros: nowMicros ?? HTTPServer.systemMonotonicMicros, keptBuffers: keptBuffers)
        box.attach(self)
    }

    var clientAddress: String {
        server.listenAddress.hasPrefix("unix:") ? server.listenAddress : "127.0.0.1:\(server.port)"
    }

    func connection(reconnect: Bool = true, timeoutSeconds: Int = 10) -> HTTPConnection {
        HTTPConnection(address: clientAddress, reconnect: reconnect, timeoutSeconds: timeoutSeconds)
    }
}

/// Handlers need the TestServer's counters, which exist only once the server has started.
private final class RoutesBox: Sendable {
    private let ownerSlot = Mutex<TestServer?>(nil)
    var owner: TestServer? { ownerSlot.withLock { $0 } }
    func attach(_ owner: TestServer) { ownerSlot.withLock { $0 = owner } }

    var router: Router {
        var router = Router()
        router.add("GET", "/api/find-my/devices/{id}/locations") { request in
            .json(
                "{\"id\": \"\(request.pathParameters["id"] ?? "")\", \"since\": \"\(request.query("since") ?? "")\", "
                    + "\"q\": \"\(request.query("q") ?? "")\", \"token\": \"\(request.headers["x-device-token"] ?? "")\"}"
            )
        }
        router.add("POST", "/echo") { [self] request in
            owner?.echoCalls.withLock { $0 += 1 }
            return HTTPResponse(status: 200, body: request.body)
        }
        // A 1 MiB answer written into an array taken from the server's pool, its bytes the
        // answer's number (`?n=`).
        router.add("GET", "/kept") { [self] request in
            guard let owner else { return .text("no server", status: 503) }
            var body = owner.keptBuffers.take(capacity: 2 << 20)
            owner.keptStorages.withLock {
                $0.append(body.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) })
            }
            body.append(contentsOf: repeatElement(UInt8(request.query("n") ?? "0") ?? 0, count: 1 << 20))
            return HTTPResponse(status: 200, body: body)
        }
        router.add("GET", "/cached") { _ in
            var response = HTTPResponse.text("the same for an hour")
            response.headers.set("Cache-Control", "public, max-age=3600")
            response.headers.set("X-Content-Type-Options", "nosniff")
            return response
        }
        router.add("GET", "/whoami") { request in
            .text("\(request.connectionID) \(request.remoteAddress)")
        }
        // Holds its thread until `n` handlers run at once (or, if they never do, until a generous
        // deadline, after which every handler gives up at once): the peak is then seen whatever
        // the machine's speed, not sampled during a fixed sleep.
        router.add("GET", "/together") { [self] request in
            guard let owner else { return .text("no server") }
            let wanted = request.query("n").flatMap { Int($0) } ?? 1
            owner.handlersRunning.withLock {
                $0.now += 1
                $0.max = max($0.max, $0.now)
            }
            defer { owner.handlersRunning.withLock { $0.now -= 1 } }
            let met = waitUntil(timeoutSeconds: 30) {
                owner.handlersRunning.withLock { $0.max >= wanted } || owner.gaveUp.withLock { $0 }
            }
            if !met { owner.gaveUp.withLock { $0 = true } }
            return .text("together")
        }
        // Answered from another thread after `ms` milliseconds, as the log's group commit does: a
        // latency to simulate, not a synchronisation.
        router.addDeferred("POST", "/deferred/later") { request, reply in
            let milliseconds = request.query("ms").flatMap { Int($0) } ?? 10
            let body = request.body
            Thread.detachNewThread {
                usleep(UInt32(milliseconds) * 1000)
                reply(HTTPResponse(status: 202, body: body))
            }
        }
        router.addDeferred("GET", "/deferred/now") { _, reply in
            reply(.text("at once"))
            reply(.text("a second answer is ignored"))
        }
        router.addDeferred("GET", "/deferred/held") { [self] _, reply in
            owner?.heldReplies.withLock { $0.append(reply) }
        }
        // Deferred, its answer made on a worker that waits for the test to open `blockedRelease`:
        // a deferred route whose answer needs blocking work now and then.
        router.addDeferred("GET", "/deferred/blocking") { [self] _, reply in
            reply.answerBlocking { [self] in
                guard let owner else { return .text("no server") }
                owner.handlersRunning.withLock {
                    $0.now += 1
                    $0.max = max($0.max, $0.now)
                }
                owner.blockedRelease.wait()
                owner.handlersRunning.withLock { $0.now -= 1 }
                return .text("answered on a worker")
            }
        }
        // Blocks until the test opens `blockedRelease`: the test decides when it ends.
        router.add("GET", "/blocked") { [self] _ in
            guard let owner else { return .text("no server") }
            owner.handlersRunning.withLock {
                $0.now += 1
                $0.max = max($0.max, $0.now)
            }
            owner.blockedRelease.wait()
            owner.handlersRunning.withLock { $0.now -= 1 }
            return .text("released")
        }
        return router
    }
}

func uniqueSocketPath() -> String {
    "/tmp/findmy-http-test-\(getpid())-\(UUID().uuidString.prefix(8)).sock"
}

/// Runs `body(i)` for i in 0..<count on that many OS threads at once (the test's cooperative pool
/// has only as many threads as cores, which would serialize blocking clients).
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        Thread {
            body(index)
            group.leave()
        }.start()
    }
    group.wait()
}

/// A gate that blocked threads pass once the test opens it, and for good.
final class Latch: Sendable {
    private let condition = NSCondition()
    private let isOpen = Mutex(false)

    func wait() {
        condition.lock()
        defer { condition.unlock() }
        while !isOpen.withLock({ $0 }) { condition.wait() }
    }

    func open() {
        condition.lock()
        defer { condition.unlock() }
        isOpen.withLock { $0 = true }
        condition.broadcast()
    }
}

/// `body` run on a new thread; `isFinished` turns true once it has returned.
final class Background: Sendable {
    private let finished = Mutex(false)
    var isFinished: Bool { finished.withLock { $0 } }

    init(_ body: @escaping @Sendable () -> Void) {
        Thread { [self] in
            body()
            finished.withLock { $0 = true }
        }.start()
    }
}

/// A monotonic clock the test moves by hand, for the server's rate and progress rules.
final class ManualClock: Sendable {
    private let micros = Mutex<Int64>(1_000_000)

    var now: @Sendable () -> Int64 { { [self] in micros.withLock { $0 } } }

    func advance(seconds: Double) {
        micros.withLock { $0 += Int64(seconds * 1_000_000) }
    }
}

extension HTTPClientResponse {
    /// Every value of header `name`, ignoring case, in order.
    func values(_ name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }
}
