import Core
import Events
import Identity
import Testing

@testable import Presence

/// The change rule as a transcript: last recorded state and headscale's answer in, event out.
@Suite struct PresenceRuleTests {
    let link = PresenceBook.Link(nodeID: "1", nodeName: "laptop")
    let now: Int64 = 1_800_000_000_000_000

    func node(online: Bool, lastSeen: Int64?) -> HeadscaleNode {
        HeadscaleNode(
            id: "1", name: "laptop", hostName: "laptop", userName: "alice", online: online,
            lastSeenMicros: lastSeen)
    }

    func change(_ last: PresenceBook.State?, _ observed: HeadscaleNode) -> PresenceChanged? {
        PresenceRule.change(deviceID: 7, link: link, last: last, observed: observed, nowMicros: now)
    }

    @Test func firstObservationIsRecorded() {
        #expect(
            change(nil, node(online: true, lastSeen: 5))
                == PresenceChanged(
                    deviceID: 7, nodeID: "1", online: true, lastSeenMicros: 5, observedAtMicros: now))
        let offline = change(nil, node(online: false, lastSeen: 5))
        #expect(offline?.online == false)
        #expect(offline?.happenedAtMicros == 5)
    }

    @Test func onlyChangesAreRecorded() {
        let online = PresenceBook.State(online: true, lastSeenMicros: nil, changedAtMicros: 1)
        let offline = PresenceBook.State(online: false, lastSeenMicros: 100, changedAtMicros: 100)
        #expect(change(online, node(online: true, lastSeen: 50)) == nil)
        #expect(change(online, node(online: true, lastSeen: nil)) == nil)
        #expect(change(offline, node(online: false, lastSeen: 100)) == nil)
        #expect(change(offline, node(online: false, lastSeen: 90)) == nil)
        #expect(change(offline, node(online: false, lastSeen: nil)) == nil)
        #expect(change(online, node(online: false, lastSeen: 200))?.lastSeenMicros == 200)
        #expect(change(offline, node(online: true, lastSeen: 100))?.online == true)
        // Online and offline again between two polls: lastSeen moved.
        #expect(change(offline, node(online: false, lastSeen: 150))?.lastSeenMicros == 150)
    }

    @Test func anotherNodeIsNotJudged() {
        var other = node(online: true, lastSeen: nil)
        other.id = "2"
        #expect(change(nil, other) == nil)
    }

    @Test func aLastSeenInTheFutureIsRecordedAtTheObservation() {
        let changed = change(nil, node(online: false, lastSeen: now + 3_600_000_000))
        #expect(changed?.happenedAtMicros == now)
    }

    @Test func backoffDoublesUpToItsMaximum() {
        var configuration = HeadscaleConfiguration(url: "http://h", apiKeyFile: "/k")
        configuration.pollSeconds = 30
        configuration.backoffSecondsMax = 600
        #expect(
            (0...7).map { configuration.delaySeconds(afterFailures: $0) } == [
                30, 60, 120, 240, 480, 600, 600, 600,
            ])
        #expect(configuration.nodesURL == "http://h/api/v1/node")
        configuration.url = "http://h/"
        #expect(configuration.nodesURL == "http://h/api/v1/node")
    }
}
