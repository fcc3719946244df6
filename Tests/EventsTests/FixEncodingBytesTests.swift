import Events
import Testing
import Workload

/// What a single-fix report costs on disk inside a group record, and where the bytes go
/// (docs/benchmarks.md, "Fix batch payload version 2"). The breakdown is printed: each line is what
/// the group record shrinks by when that one field is made the same in every request of the group,
/// so it is the field's share of the compressed record, not of the raw one.
@Suite struct FixEncodingBytesTests {
    /// Requests per group record the ingest bench reached at 64 connections (11-25).
    static let groupMembers = 18
    static let devices = 1_000

    /// `groups` group records of single-fix reports, each request from another device with its own
    /// track, the way `findmy-bench ingest --client swift` sends them.
    static func reports(
        groups: Int, version: UInt16, vary: (inout FixBatch, inout Int64) -> Void = { _, _ in }
    ) -> [[EncodedEvent]] {
        var tracks = (0..<devices).map {
            TrackGenerator(seed: UInt64($0) &* 7_919, startMicros: 1_764_684_000_000_000)
        }
        var generator = SeededGenerator(seed: 15)
        var received: Int64 = 1_764_684_400_000_000
        return (0..<groups).map { _ in
            (0..<groupMembers).map { _ in
                let device = Int.random(in: 0..<devices, using: &generator)
                var batch = FixBatch(
                    deviceID: UInt64(device + 1),
                    batchID: UUID128(high: generator.next(), low: generator.next()),
                    fixes: [tracks[device].next()])
                received += Int64.random(in: 100...3_000, using: &generator)
                var receivedAt = received
                vary(&batch, &receivedAt)
                return EventCodec.encode(
                    .fixBatch(batch), receivedAtMicros: receivedAt, fixBatchVersion: version)
            }
        }
    }

    /// Bytes of the group records holding `groups`, frames included.
    static func recordBytes(_ groups: [[EncodedEvent]]) -> Int {
        var offset: UInt64 = 0
        var total = 0
        for group in groups {
            let members = group.map { encoded in
                var member = GroupRecord.member(encoded)
                member.header.offset = offset
                offset += 1
                return member
            }
            var buffer: [UInt8] = []
            GroupRecord.append(members: members, salt: 0x5a17, to: &buffer)
            total += buffer.count
        }
        return total
    }

    static let breakdown: [(String, @Sendable (inout FixBatch, inout Int64) -> Void)] = [
        ("batch id", { batch, _ in batch.batchID = .zero }),
        ("device", { batch, _ in batch.deviceID = 1 }),
        ("received_at", { _, received in received = 1_764_684_400_000_000 }),
        ("recorded_at", { batch, _ in batch.fixes[0].recordedAtMicros = 1_764_684_000_000_000 }),
        ("latitude", { batch, _ in batch.fixes[0].latitude = 50 }),
        ("longitude", { batch, _ in batch.fixes[0].longitude = 10 }),
        ("accuracy_m", { batch, _ in batch.fixes[0].accuracyMeters = 10 }),
        ("altitude_m", { batch, _ in batch.fixes[0].altitudeMeters = 100 }),
        ("speed_mps", { batch, _ in batch.fixes[0].speedMetersPerSecond = 1 }),
        ("heading_deg", { batch, _ in batch.fixes[0].headingDegrees = 90 }),
        (
            "battery, charging",
            { batch, _ in
                batch.fixes[0].batteryPercent = 50
                batch.fixes[0].isCharging = false
            }
        ),
        ("source", { batch, _ in batch.fixes[0].source = "significant" }),
    ]

    /// Bytes per fix of single-fix reports in groups, with the breakdown printed.
    static func bytesPerFix(version: UInt16) -> Double {
        let groups = 200
        let fixes = Double(groups * groupMembers)
        let total = recordBytes(reports(groups: groups, version: version))
        let frame = Double(groups * (12 + 96)) / fixes
        var lines = [
            "fix batch payload v\(version), single-fix reports, \(groupMembers) per group record, "
                + "\(devices) devices' own tracks: \(fmt(Double(total) / fixes)) B/fix",
            "  frame + group header: \(fmt(frame))",
        ]
        var accounted = frame
        for (name, vary) in breakdown {
            let share =
                Double(total - recordBytes(reports(groups: groups, version: version, vary: vary))) / fixes
            accounted += share
            lines.append("  \(name): \(fmt(share))")
        }
        lines.append(
            "  the rest (member directory and payload framing): \(fmt(Double(total) / fixes - accounted))")
        print(lines.joined(separator: "\n"))
        return Double(total) / fixes
    }

    @Test func aSingleFixReportOfItsOwnTrackCostsAtMost64BytesInAGroupOf18() {
        let version1 = Self.bytesPerFix(version: 1)
        let current = Self.bytesPerFix(version: EventCodec.fixBatchVersionCurrent)
        #expect(current <= 64, "\(current) bytes per fix (version 1: \(version1))")
    }

    private static func fmt(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(abs(tenths % 10))"
    }
}
