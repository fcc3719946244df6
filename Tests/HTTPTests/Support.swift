import Foundation
import HTTP
import HTTPClient
import Synchronization

/// A server with the routes the tests exercise, and counters the handlers keep.
final class TestServer: Sendable {
    let server: HTTPServer
    let echoCalls = Mutex(0)
    let handlersRunning = Mutex((now: 0, max: 0))
    let observations = Mutex<[HTTPServer.Observation]>([])
    let slowStarted = Mutex(false)
    /// Replies of `/deferred/held` requests, kept until the test answers them.
    let heldReplies = Mutex<[HTTPReply]>([])

    init(listen: String = "127.0.0.1:0", limits: HTTPServer.Limits = HTTPServer.Limits()) throws {
        let box = RoutesBox()
        server = try HTTPServer.start(
            listen: listen, router: box.router, limits: limits,
            observer: { [box] observation in box.owner?.observations.withLock { $0.append(observation) } })
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
        router.add("GET", "/whoami") { request in
            .text("\(request.connectionID) \(request.remoteAddress)")
        }
        router.add("GET", "/sleep") { [self] request in
            owner?.handlersRunning.withLock {
                $0.now += 1
                $0.max = max($0.max, $0.now)
            }
            usleep(UInt32(request.query("ms").flatMap { Int($0) } ?? 10) * 1000)
            owner?.handlersRunning.withLock { $0.now -= 1 }
            return .text("slept")
        }
        // Answered from another thread after `ms` milliseconds, as the log's group commit does.
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
        router.add("GET", "/slow") { [self] _ in
            owner?.slowStarted.withLock { $0 = true }
            usleep(500_000)
            return .text("finished")
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

func waitUntil(timeoutSeconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeoutSeconds)
    while !condition() {
        if Date() > deadline { return false }
        usleep(5_000)
    }
    return true
}
