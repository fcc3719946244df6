import Foundation
import JSON
import Testing

@testable import Presence

/// Each version's answer (Fixtures/headscale) read into the same nodes: ids as strings, users null
/// for tagged nodes, both tag vocabularies, timestamps with and without fractions, never-seen.
@Suite struct HeadscaleShapeTests {
    static func fixture(_ name: String) throws -> [UInt8] {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return Array(try Data(contentsOf: url.appendingPathComponent("Fixtures/headscale/" + name)))
    }

    static func nodes(_ name: String) throws -> [HeadscaleNode] {
        try HeadscaleNodes.nodes(status: 200, body: fixture(name + ".json")).get()
    }

    static func micros(_ text: String) -> Int64 { try! RFC3339.parseMicros(text) }

    @Test func version023() throws {
        let nodes = try Self.nodes("v0.23")
        #expect(
            nodes == [
                HeadscaleNode(
                    id: "1", name: "alice-laptop", hostName: "alice-laptop", userName: "alice", online: true,
                    lastSeenMicros: Self.micros("2024-10-01T12:34:56.789012Z")),
                HeadscaleNode(
                    id: "2", name: "desk", hostName: "alice-desktop", userName: "alice", online: false,
                    lastSeenMicros: Self.micros("2024-10-01T09:00:00Z"), tags: ["tag:desk", "tag:office"]),
                HeadscaleNode(
                    id: "3", name: "bob-laptop", hostName: "bob-laptop", userName: "bob", online: false,
                    lastSeenMicros: nil),
            ])
    }

    @Test func version025WithOIDCUserFields() throws {
        let nodes = try Self.nodes("v0.25")
        #expect(nodes.map(\.userName) == ["alice", "alice"])
        #expect(nodes.map(\.online) == [false, true])
        #expect(nodes[1].lastSeenMicros == Self.micros("2025-02-03T17:05:09.5Z"))
        #expect(nodes[0].lastSeenMicros == Self.micros("2025-02-03T17:00:00Z"))
    }

    @Test func version027OnlineAbsentAndZeroTime() throws {
        let nodes = try Self.nodes("v0.27")
        #expect(nodes[0].online == false)  // absent
        // One nanosecond past the second truncates to the second.
        #expect(nodes[0].lastSeenMicros == Self.micros("2025-10-10T08:00:00Z"))
        #expect(nodes[1].lastSeenMicros == nil)  // 0001-01-01T00:00:00Z: never seen
        #expect(nodes[1].tags == ["tag:router"])
        #expect(nodes[1].userName == "infra")
    }

    @Test func version028TagsAndTaggedNodeWithoutUser() throws {
        let nodes = try Self.nodes("v0.28")
        #expect(nodes.map(\.id) == ["1", "9"])
        #expect(nodes[1].userName == nil)
        #expect(nodes[1].tags == ["tag:ci"])
        #expect(nodes[1].lastSeenMicros == Self.micros("2026-02-01T07:29:59.25Z"))
    }

    @Test func version029LastSeenAbsentAndOffset() throws {
        let nodes = try Self.nodes("v0.29")
        #expect(nodes[0].lastSeenMicros == nil)
        #expect(nodes[1].lastSeenMicros == Self.micros("2026-03-02T10:00:00Z"))
        #expect(nodes[1].userName == nil)  // no `user` member at all
    }

    @Test func numericIdsAndAnEmptyListAreRead() throws {
        let one = try HeadscaleNodes.parse(Array(#"{"nodes":[{"id":42,"name":"n","online":true}]}"#.utf8))
        #expect(one.map(\.id) == ["42"])
        #expect(try HeadscaleNodes.parse(Array("{}".utf8)).isEmpty)
        #expect(try HeadscaleNodes.parse(Array(#"{"nodes":[]}"#.utf8)).isEmpty)
    }

    @Test func refusedKeysInEveryVersionsWay() throws {
        #expect(
            HeadscaleNodes.nodes(status: 401, body: Array("Unauthorized".utf8))
                == .failure(.unauthorized(status: 401)))
        #expect(
            HeadscaleNodes.nodes(status: 500, body: try Self.fixture("unauthorized-500.json"))
                == .failure(.unauthorized(status: 500)))
        #expect(
            HeadscaleNodes.nodes(status: 500, body: try Self.fixture("unauthorized-500-plain.txt"))
                == .failure(.unauthorized(status: 500)))
        #expect(
            HeadscaleNodes.nodes(status: 500, body: Array("database is locked".utf8))
                == .failure(.httpStatus(500)))
        #expect(HeadscaleNodes.nodes(status: 404, body: []) == .failure(.httpStatus(404)))
    }

    @Test func badAnswersSayWhatIsWrong() {
        for body in [
            "<html>", #"{"nodes": 3}"#, #"{"nodes":[{"name":"no id"}]}"#, #"{"nodes":[{"id":"-1"}]}"#,
            #"{"nodes":[{"id":"1","lastSeen":"yesterday"}]}"#, #"{"nodes":[{"id":"1","online":"yes"}]}"#,
        ] {
            guard
                case .failure(.badAnswer(let why)) = HeadscaleNodes.nodes(status: 200, body: Array(body.utf8))
            else {
                Issue.record("\(body) was read")
                continue
            }
            #expect(!why.isEmpty)
        }
    }
}
