import HTTP
import Synchronization
import Testing

/// A deferred handler's `HTTPReply.answerBlocking`: the answer is made on a worker thread, so
/// that work which may block (PostgreSQL) never holds an event-loop thread.
@Suite struct DeferredBlockingTests {
    /// One event-loop thread: had the blocking job run on it, no other connection would be served
    /// until the test opened the latch.
    @Test func aBlockingAnswerLeavesTheEventLoopFree() throws {
        var limits = HTTPServer.Limits()
        limits.eventLoopThreads = 1
        let test = try startServer("127.0.0.1:0", limits: limits)
        defer { test.server.stop() }
        let answer = Mutex<String?>(nil)
        let client = Background {
            let text =
                (try? test.connection(reconnect: false, timeoutSeconds: 60).send("GET", "/deferred/blocking"))?
                .bodyText
            answer.withLock { $0 = text ?? "failed" }
        }
        #expect(waitUntil(timeoutSeconds: 30) { test.handlersRunning.withLock { $0.now } == 1 })
        let meanwhile = try test.connection(reconnect: false, timeoutSeconds: 30).send("GET", "/deferred/now")
        #expect(meanwhile.status == 200)
        #expect(meanwhile.bodyText == "at once")
        #expect(answer.withLock { $0 } == nil)
        test.blockedRelease.open()
        #expect(waitUntil(timeoutSeconds: 30) { client.isFinished })
        #expect(answer.withLock { $0 } == "answered on a worker")
    }

    /// In process (`Router.respond`, the admin socket's calls): the waiting thread runs the job.
    @Test func inProcessTheCallerRunsTheBlockingAnswer() {
        var router = Router()
        router.addDeferred("GET", "/later") { request, reply in
            reply.answerBlocking { .text("made for \(request.path)") }
        }
        let (routeName, response) = router.respond(to: HTTPRequest(method: "GET", target: "/later"))
        #expect(routeName == "/later")
        #expect(response.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self) == "made for /later")
    }
}
