import Foundation
import HTTPClient
import PushFakeSupport
import Synchronization
import Testing

/// Requests beyond `transfersInCurlMax` wait in the client's own queue: every one is still sent,
/// in turn, multiplexed on the one connection, and answered.
@Suite struct HTTP2ClientQueueTests {
    @Test func requestsBeyondTheCurlLimitWaitTheirTurnAndAllAreAnswered() throws {
        let fake = try FakeProvider(
            "apns", ["--team", "TEAM123456", "--key-id", "KEY1234567", "--bundle", "org.findmy.app"])
        defer { fake.stop() }
        var options = HTTP2Client.Options(caFile: fake.caFile)
        options.transfersInCurlMax = 2
        let client = HTTP2Client(name: "queue-test", options: options)
        defer { client.close() }
        let requestsCount = 40
        let statuses = Mutex<[Int]>([])
        for index in 0..<requestsCount {
            // No provider token: the fake answers each 403 MissingProviderToken, an answer all the same.
            client.send(
                OutgoingRequest(
                    url: fake.baseURL + "/3/device/token\(index)", headers: ["apns-push-type: alert"],
                    body: Array("{}".utf8))
            ) { result in
                let status = (try? result.get()).map { $0.httpMajorVersion == 2 ? $0.status : -2 } ?? -1
                statuses.withLock { $0.append(status) }
            }
        }
        let deadline = Date().addingTimeInterval(60)
        while statuses.withLock({ $0.count }) < requestsCount && Date() < deadline { usleep(10_000) }
        let answered = statuses.withLock { $0 }
        #expect(answered.count == requestsCount && answered.allSatisfy { $0 == 403 }, "\(answered)")
        #expect(client.connectionsOpened == 1)
    }
}
