import HTTP
import HTTPClient
import Testing

/// A complete answer of 16 KiB or more is sent from the handler's array itself (no copy into
/// MHD): every byte arrives, in order, answer after answer on one keep-alive connection, while
/// each array is released and the next one's bytes differ; smaller answers are copied as before.
@Test func largeAnswersArriveWholeFromTheHandlersArray() throws {
    let test = try startServer("127.0.0.1:0", limits: HTTPServer.Limits(bodyBytesMax: 4 << 20))
    defer { test.server.stop() }
    let connection = test.connection()
    for (round, size) in [16 << 10, (16 << 10) - 1, 3 << 20, 1, 300_001, 0, 2_500_000].enumerated() {
        let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ round &* 7 &+ $0 >> 9) }
        let answer = try connection.send("POST", "/echo", body: body)
        #expect(answer.status == 200, "round \(round)")
        #expect(answer.header("content-length") == "\(size)", "round \(round)")
        #expect(answer.body == body, "round \(round): \(answer.body.count) of \(size) bytes, or others")
    }
}

/// A large answer's array goes to the server's pool once MHD is done with it, and the next large
/// answer is written in it: on one keep-alive connection MHD has released the first response
/// before it reads the second request, so the second handler takes the first one's array.
@Test func aLargeAnswersArrayServesTheNext() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let connection = test.connection()
    for round in 1...3 {
        let answer = try connection.send("GET", "/kept?n=\(round)")
        #expect(answer.status == 200)
        #expect(
            answer.body.count == 1 << 20 && answer.body.allSatisfy { $0 == UInt8(round) }, "round \(round)")
    }
    let storages = test.keptStorages.withLock { $0 }
    #expect(storages.count == 3 && Set(storages).count == 1, "\(storages)")
}
