import Events
import Foundation
import HTTPClient
import JSON
import NATSLog
import NATSSupport
import Testing

/// Registry snapshots of an ingest node (docs/snapshots.md, "Ingest nodes"), with real processes:
/// a node writes a snapshot of the stream when it stops; started again it loads it, folds only the
/// records after it, and serves a token registered before it. A snapshot of another stream is
/// refused (and deleted), a damaged one falls back to the older one. What is asserted is what the
/// node reports: its `registry_rebuilt` and `registry_snapshot_skipped` lines.
@Suite(.serialized) struct IngestNodeSnapshotTests {
    static let partitions = IngestNodesTests.partitions

    static func startNode(_ cluster: NATSCluster, data: String) throws -> ServerProcess {
        try ServerProcess(
            data: data, extraArguments: ["--log", cluster.logArgument, "--log-partitions", "\(partitions)"])
    }

    /// The node's structured lines named `event`, parsed.
    static func lines(_ node: ServerProcess, _ event: String) -> [JSONValue] {
        node.process.standardError.split(separator: "\n").compactMap { line in
            guard line.contains("\"\(event)\"") else { return nil }
            return try? JSONParser.parse(Array(line.utf8))
        }
    }

    static func rebuilt(_ node: ServerProcess) throws -> (fromSnapshot: Bool, offset: Int64, replayed: Int64)
    {
        let line = try #require(lines(node, "registry_rebuilt").first, "\(node.process.standardError)")
        return (
            try line["from_snapshot"]!.boolValue, try line["snapshot_offset"]!.int64Value,
            try line["records_replayed"]!.int64Value
        )
    }

    static func snapshotOffsets(_ data: String) -> [UInt64] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: data + "/snapshots")) ?? []
        return names.compactMap { name in
            guard name.hasPrefix("registry-"), name.hasSuffix(".snap") else { return nil }
            return UInt64(name.dropFirst("registry-".count).dropLast(".snap".count))
        }.sorted()
    }

    static func snapshotPath(_ data: String, _ offset: UInt64) -> String {
        let digits = String(offset)
        return data + "/snapshots/registry-" + String(repeating: "0", count: 20 - digits.count) + digits
            + ".snap"
    }

    /// Rewrites a snapshot file's bytes, with a CRC that matches again when `fixCRC`.
    static func change(_ path: String, fixCRC: Bool, _ body: (inout [UInt8]) -> Void) throws {
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        body(&bytes)
        if fixCRC {
            let crc = CRC32C.checksum(Array(bytes.dropLast(4)))
            for index in 0..<4 {
                bytes[bytes.count - 4 + index] = UInt8(truncatingIfNeeded: crc >> (8 * UInt32(index)))
            }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    static func report(_ connection: HTTPConnection, token: String) throws -> Answer {
        try post(
            connection, "/api/find-my/report", token: token,
            body: reportBody(batchID: UUID().uuidString.lowercased(), fixes: [fixJSON(latitude: 3)]))
    }

    @Test func aNodeStartsFromItsSnapshotAndRefusesAForeignOrDamagedOne() throws {
        let cluster = try NATSCluster()
        defer { cluster.stopAll() }
        let scratch = ScratchDirectory()
        let one = scratch.path + "/node1"
        var running: [ServerProcess] = []
        defer { for node in running { node.kill9() } }

        // 1. A user, a device and a report through node 1; its stop writes a snapshot at the end.
        let first = try Self.startNode(cluster, data: one)
        running.append(first)
        let userToken = try addUser("alice", data: one)
        let enrolled = try enrol(
            HTTPConnection(address: first.address), userToken: userToken,
            uuid: "3b4e28ba-2fa1-11d2-883f-0016d3cca427")
        let deviceToken = try #require(enrolled.string("device_token"), "\(enrolled.body)")
        #expect(try Self.report(HTTPConnection(address: first.address), token: deviceToken).status == 200)
        #expect(try Self.rebuilt(first).fromSnapshot == false)
        #expect(first.stop() == 0, "\(first.process.standardError)")
        let firstSnapshot = try #require(Self.snapshotOffsets(one).last, "no snapshot at stop")
        #expect(firstSnapshot == UInt64(try IngestNodesTests.streamRecords(cluster).count))

        // 2. More records through node 2 while node 1 is down.
        let two = try Self.startNode(cluster, data: scratch.path + "/node2")
        running.append(two)
        _ = try addUser("bob", data: scratch.path + "/node2")
        #expect(try Self.report(HTTPConnection(address: two.address), token: deviceToken).status == 200)
        #expect(two.stop() == 0)
        let after = try IngestNodesTests.streamRecords(cluster).filter { $0.record.offset >= firstSnapshot }
        #expect(after.count == 2, "bob's user, the second batch")

        // 3. Node 1 again: from its snapshot, folding only what came after; the old token works.
        let second = try Self.startNode(cluster, data: one)
        running.append(second)
        let rebuilt = try Self.rebuilt(second)
        #expect(
            rebuilt.fromSnapshot && rebuilt.offset == Int64(firstSnapshot), "\(second.process.standardError)")
        #expect(rebuilt.replayed == Int64(after.count))
        #expect(try Self.report(HTTPConnection(address: second.address), token: deviceToken).status == 200)
        #expect(second.stop() == 0)
        let offsets = Self.snapshotOffsets(one)
        #expect(offsets.count == 2 && offsets.first == firstSnapshot, "\(offsets)")
        let newest = try #require(offsets.last)

        // 4. The newest damaged (a flipped byte in its body): the older one is loaded instead.
        try Self.change(Self.snapshotPath(one, newest), fixCRC: false) { $0[$0.count - 20] ^= 0x01 }
        let third = try Self.startNode(cluster, data: one)
        running.append(third)
        let fallback = try Self.rebuilt(third)
        #expect(
            fallback.fromSnapshot && fallback.offset == Int64(firstSnapshot), "\(third.process.standardError)"
        )
        let skipped = Self.lines(third, "registry_snapshot_skipped")
        #expect(skipped.count == 1 && (try? skipped[0]["deleted"]?.boolValue) == false, "\(skipped)")
        #expect(try Self.report(HTTPConnection(address: third.address), token: deviceToken).status == 200)
        third.kill9()

        // 5. A snapshot of another stream (its log id changed, bytes 24..<40) in a fresh node's
        // directory: refused with a line, deleted, and the node folds the stream from offset 0.
        let three = scratch.path + "/node3"
        try FileManager.default.createDirectory(
            atPath: three + "/snapshots", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: Self.snapshotPath(one, firstSnapshot), toPath: Self.snapshotPath(three, firstSnapshot))
        try Self.change(Self.snapshotPath(three, firstSnapshot), fixCRC: true) { $0[30] ^= 0xff }
        let foreign = try Self.startNode(cluster, data: three)
        running.append(foreign)
        let refused = Self.lines(foreign, "registry_snapshot_skipped")
        #expect(refused.count == 1, "\(foreign.process.standardError)")
        #expect(
            (try? refused.first?["reason"]?.stringValue)?.contains("not this stream") == true, "\(refused)")
        #expect((try? refused.first?["deleted"]?.boolValue) == true)
        let full = try Self.rebuilt(foreign)
        let streamed = try IngestNodesTests.streamRecords(cluster).count
        #expect(!full.fromSnapshot && full.replayed == Int64(streamed))
        #expect(try Self.report(HTTPConnection(address: foreign.address), token: deviceToken).status == 200)
        #expect(foreign.stop() == 0)
    }
}
