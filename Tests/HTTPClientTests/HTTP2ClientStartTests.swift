import Dispatch
import HTTPClient
import Synchronization
import Testing

/// A client costs no thread and no libcurl state until its first request: a server makes one for
/// each channel it may use, and most never send.
@Suite struct HTTP2ClientStartTests {
    @Test func theThreadStartsWithTheFirstRequestAndCloseEndsIt() {
        let client = HTTP2Client(name: "start-test")
        #expect(!client.isStarted)
        let answered = DispatchSemaphore(value: 0)
        let outcome = Mutex<String>("")
        // Port 1 on loopback: refused at once, an outcome all the same.
        client.send(OutgoingRequest.get("http://127.0.0.1:1/", headers: [])) { result in
            outcome.withLock { $0 = (try? result.get()).map { "status \($0.status)" } ?? "failed" }
            answered.signal()
        }
        #expect(client.isStarted)
        answered.wait()
        #expect(outcome.withLock { $0 } == "failed")
        client.close()
        #expect(!client.isStarted)
    }

    @Test func aClientClosedBeforeAnyRequestRefusesLaterOnes() {
        let client = HTTP2Client(name: "start-test")
        client.close()
        let outcome = Mutex<String>("")
        client.send(OutgoingRequest.get("http://127.0.0.1:1/", headers: [])) { result in
            outcome.withLock { $0 = (try? result.get()).map { "status \($0.status)" } ?? "\(result)" }
        }
        #expect(outcome.withLock { $0 }.contains("closed"))
        #expect(!client.isStarted)
    }
}
